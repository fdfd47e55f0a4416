package pipeline

import "github.com/vsr-dev/vsr/model"

// Engine is what the pipeline needs of a model to run one video (a model
// family's Session is one). It and the capabilities the pipeline looks
// for (model.Planner, model.Streamer, model.OutCounter, model.FrameOuter)
// are defined, with what the pipeline does without each, in package
// model.
type Engine = model.Engine
