package cuda

import "sync"

// CaptureMode is a CUstreamCaptureMode: which other threads' unsafe API
// calls (allocations, synchronizations) a capture forbids.
type CaptureMode int32

// Capture modes.
const (
	CaptureGlobal      CaptureMode = 0
	CaptureThreadLocal CaptureMode = 1
	CaptureRelaxed     CaptureMode = 2
)

// BeginCapture starts recording the stream's work into a graph instead of
// running it (cuStreamBeginCapture_v2). Call it and EndCapture from a
// goroutine held with Context.LockThread.
func (s *Stream) BeginCapture(mode CaptureMode) error {
	return s.ctx.do(func() error { return check("cuStreamBeginCapture_v2", drv.cuStreamBeginCapture(s.h, int32(mode))) })
}

// EndCapture ends the capture begun by BeginCapture and returns the
// recorded graph (cuStreamEndCapture).
func (s *Stream) EndCapture() (*Graph, error) {
	var g uintptr
	err := s.ctx.do(func() error { return check("cuStreamEndCapture", drv.cuStreamEndCapture(s.h, &g)) })
	if err != nil {
		if g != 0 {
			s.ctx.do(func() error { drv.cuGraphDestroy(g); return nil })
		}
		return nil, err
	}
	return &Graph{ctx: s.ctx, h: g}, nil
}

// Capturing reports whether the stream is being captured.
func (s *Stream) Capturing() (bool, error) {
	if drv.cuStreamIsCapturing == nil {
		return false, &Error{Op: "cuStreamIsCapturing", Code: ErrorNotSupported, Name: "CUDA_ERROR_NOT_SUPPORTED"}
	}
	var st int32
	err := s.ctx.do(func() error { return check("cuStreamIsCapturing", drv.cuStreamIsCapturing(s.h, &st)) })
	return st == 1, err
}

// Graph is a CUgraph, recorded work that can be instantiated and replayed.
type Graph struct {
	ctx *Context
	h   uintptr

	mu     sync.Mutex
	closed bool
}

// NumNodes returns the number of nodes in the graph (cuGraphGetNodes).
func (g *Graph) NumNodes() (int, error) {
	if drv.cuGraphGetNodes == nil {
		return 0, &Error{Op: "cuGraphGetNodes", Code: ErrorNotSupported, Name: "CUDA_ERROR_NOT_SUPPORTED"}
	}
	var n uintptr
	err := g.ctx.do(func() error { return check("cuGraphGetNodes", drv.cuGraphGetNodes(g.h, nil, &n)) })
	return int(n), err
}

// Instantiate makes an executable graph (cuGraphInstantiateWithFlags).
// The Graph may be closed afterwards; the GraphExec stands alone.
func (g *Graph) Instantiate() (*GraphExec, error) {
	var x uintptr
	err := g.ctx.do(func() error { return check("cuGraphInstantiateWithFlags", drv.cuGraphInstantiate(&x, g.h, 0)) })
	if err != nil {
		return nil, err
	}
	return &GraphExec{ctx: g.ctx, h: x}, nil
}

// Close destroys the graph (cuGraphDestroy). It is idempotent.
func (g *Graph) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	return g.ctx.do(func() error { return check("cuGraphDestroy", drv.cuGraphDestroy(g.h)) })
}

// GraphExec is a CUgraphExec, an instantiated graph ready to launch.
type GraphExec struct {
	ctx *Context
	h   uintptr

	mu     sync.Mutex
	closed bool
}

// Launch queues one replay of the graph on s (cuGraphLaunch).
func (x *GraphExec) Launch(s *Stream) error {
	return x.ctx.do(func() error { return check("cuGraphLaunch", drv.cuGraphLaunch(x.h, s.h)) })
}

// Close destroys the executable graph (cuGraphExecDestroy). It is
// idempotent.
func (x *GraphExec) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil
	}
	x.closed = true
	return x.ctx.do(func() error { return check("cuGraphExecDestroy", drv.cuGraphExecDestroy(x.h)) })
}

// TrimGraphMemory gives the driver back the device memory it keeps for
// graphs' memory nodes beyond what graphs running now use
// (cuDeviceGraphMemTrim); later launches allocate it again. It does
// nothing where the driver lacks graph memory nodes.
func (c *Context) TrimGraphMemory() error {
	if drv.cuDeviceGraphMemTrim == nil {
		return nil
	}
	return c.do(func() error { return check("cuDeviceGraphMemTrim", drv.cuDeviceGraphMemTrim(int32(c.dev))) })
}
