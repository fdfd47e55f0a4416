// Package model is the contract between vsr's application layer and its
// model families, in the style of database/sql/driver: a Family is
// configured once (Load makes a resident Model on a device), and each video
// gets a Session of its own, which holds all per-video state (causal,
// recurrent) and is the pipeline's Engine. A resident Model is never
// changed by a request.
//
// Families register themselves from their package's init function
// (Register); package app imports each family package once, blank
// (app.go). Adding a family means adding its package and that one import:
// whatever lists the families or acts on each (the --model help, Find's
// messages, the help of a parameter that several families share, of
// --dtype and of --ranks-per-task, vsr checkpoint inspect and synth) is
// built from the registry, from what each family says of itself (its
// About, Params and StorageType, and the capabilities below), and a
// request gives a parameter in its "params" without a field of its own in
// serve.Request. Nothing else in the code changes; the user documentation
// (README.md and docs/) names the families and their parameters by hand.
//
// # The contract and its optional capabilities
//
// Every family implements Family, every resident model Model, every
// session Session (an Engine that can be closed). All else is optional:
// an interface that a family, model, session, batch or device implements
// where it can, found with a type assertion. capabilities.go defines them
// all; each family asserts those it implements. Each says what the caller
// does without it:
//
// Families:
//   - HeaderLoader: open a model without its weights. Without it, a server
//     that only queues tasks (vsr serve --workers 0) loads the weights.
//   - Explainer: say why a spec that no family detects is not one of this
//     family's models. Without it, Find's message lists what each family
//     takes.
//   - Grouper: the family's models run one video on several devices at
//     once (they are Grouped). Without it, a service gives each task one
//     device unless told otherwise.
//   - Inspector: check a checkpoint without loading it, listing every
//     problem (vsr checkpoint inspect). Without it, the command takes no
//     checkpoint of the family.
//   - Synther: write a synthetic checkpoint for tests and benchmarks (vsr
//     checkpoint synth). Without it, the command does not offer the
//     family.
//
// Models:
//   - Sizer: tell a session's largest frames without making one. Without
//     it, a service checks only a requested size against its pixel budget.
//   - Checker: check a request's parameters without making a session.
//     Without it, parameters are checked when the session is made.
//   - Resolver: take model names besides Name (the bundled model's
//     realesr-animevideov3-x3). Without it, a request names the model by
//     Name only.
//   - Preloader: load now what the model would load at first use. Without
//     it, nothing is preloaded.
//   - Warmer: run a synthetic request so that the first real one does not
//     compile kernels. Without it, the first request does.
//   - Grouped: make one session over several devices. Without it, each
//     device runs sessions of its own (independent segments).
//
// Sessions (Engines):
//   - Planner: take frames in batches of the session's own sizes (a causal
//     stream). Without it, the pipeline chooses the batches and may cut
//     the video into independent segments.
//   - Streamer: implemented by a Planner that also runs a live stream of
//     unknown length. Without it, a Planner cannot restore a live stream (an error); an
//     Engine that is not a Planner streams in the caller's batches.
//   - Resumer: save a Planner's state after some batches, and load it into
//     a new session that goes on from there (a run resumed after a crash).
//     Without it, a Planner's stopped run starts again from frame 0.
//   - Warner: something to say about the settings the session was given.
//     Without it, there is nothing to say.
//   - Exchanger: statistics of the data exchanged between devices (a
//     session over several devices). Without it, benchmarks report none.
//
// Batches:
//   - OutCounter: the batch outputs another number of frames than it takes.
//     Without it, a batch outputs as many frames as it was given.
//   - FrameOuter: the batch's output frames are not one buffer. Without
//     it, output frame k is the k-th frame of the batch's Out.
//
// Devices' capabilities (backend.Trimmer and the rest) are listed in
// package backend's doc.
package model
