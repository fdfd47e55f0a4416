package app_test

import (
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/model"
)

// The CPU device frees its task-sized buffers between tasks (the service
// trims a task's devices after it).
var _ model.Trimmer = (*cpu.Backend)(nil)
