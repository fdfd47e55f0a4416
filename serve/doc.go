// Package serve is vsr's HTTP service: a LightX2V-compatible task API over
// a durable task store, a bounded FIFO queue and workers that run tasks
// through a Runner, in one process or spread over machines.
//
// A Service is made by one of three constructors (service.go): New, whose
// workers run the tasks it queues; NewRemote, the API of workers on other
// machines, which queues tasks for them and runs none; and NewWorker, a
// worker without HTTP that takes its tasks from that work queue. What
// differs between them is one interface, the placement each constructor
// sets (placement.go: local; remoteAPI in remote.go, worker in
// worker.go). The package is cut along the seams between them:
//
//   - The HTTP API: the api type that Handler builds (http.go), whose
//     methods are the handlers of the routes and the checks of what they
//     take: tasks (http.go; their paths, inputs and output sizes in
//     paths.go, inputs.go, budget.go, check.go), uploads (uploads.go) and
//     live sessions (streams.go, streamurl.go). It reaches the scheduler
//     and the cluster only through the few methods its doc lists. Beside
//     it, the listener and its limits on clients (server.go) and the
//     metrics (metrics.go).
//   - The web page: the single-page app embedded from web/ and its
//     security headers (web.go), and the endpoints made for it: the
//     tasks as Server-Sent Events (events.go), the devices (devices.go)
//     and the before/after frames of a completed task (preview.go).
//   - The scheduler: the tasks, their queue and the workers that run them
//     (scheduler.go, queue.go, task.go), placing results and guarding
//     outputs (result.go, owner.go), and the resume journals beside the
//     outputs, kept while their tasks may run again (journal.go).
//   - The stores: TaskStore, where tasks are kept, and WorkQueue, its
//     optional capability of spreading them over machines, both declared
//     in store.go with the bbolt and memory stores; the JetStream store,
//     which has both (jetstream.go).
//   - The cluster: tasks on other machines (cluster.go), the API's side
//     (remote.go), the worker's (worker.go, private.go) and the signed
//     task records between them (seal.go).
//   - The runner: Runner, and the optional capabilities a runner may
//     have (runner.go; StreamRunner and Sizer beside the code that uses
//     them).
package serve
