package serve

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Serve answers the API on ln until ctx is done or the listener fails.
// Clients are bounded as Config says: header, body and keep-alive
// timeouts, a minimum upload rate and at most MaxConns connections (see
// connLimit: idle ones make room for new ones, so that connections opened
// and left silent cannot keep /healthz from answering).
//
// When ctx is done the worker stops first: no queued task starts, and the
// running one is interrupted (it runs again at the next start), so that a
// slow client cannot keep the device busy past a SIGTERM. Then the
// requests in flight get DrainTimeout to finish. Close the Service after
// Serve returns.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	lim := newConnLimit(ln, s.cfg.MaxConns)
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ConnState:         lim.state,
	}
	srv.RegisterOnShutdown(s.events.close) // the event streams would hold Shutdown up
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lim) }()
	select {
	case err := <-errc:
		s.stopWorker()
		return err
	case <-ctx.Done():
	}
	s.log.Info("shutting down: the running task is interrupted and runs again at the next start")
	s.stopWorker()
	dctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	err := srv.Shutdown(dctx)
	if errors.Is(err, context.DeadlineExceeded) {
		srv.Close()
		err = nil
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// connLimit bounds the connections open from a listener to max. A
// connection that arrives at the limit takes the place of the one that has
// been idle longest (none of its requests read yet, or between requests),
// which is closed; only when every connection is in a request does it
// wait. Silent connections thus cost an attacker a slot each only until
// someone else connects. The http.Server reports each connection's state
// through state.
type connLimit struct {
	net.Listener
	max int

	mu     sync.Mutex
	cond   *sync.Cond
	conns  map[net.Conn]*connInfo // open connections, as Accept returned them
	closed bool
}

type connInfo struct {
	idle  bool      // no request being read or answered
	since time.Time // when it last turned idle
}

func newConnLimit(ln net.Listener, max int) *connLimit {
	l := &connLimit{Listener: ln, max: max, conns: map[net.Conn]*connInfo{}}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// Accept accepts a connection, making room for it (see connLimit).
func (l *connLimit) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.conns) >= l.max && !l.closed {
		var oldest net.Conn
		for o, info := range l.conns {
			if info.idle && (oldest == nil || info.since.Before(l.conns[oldest].since)) {
				oldest = o
			}
		}
		if oldest == nil {
			l.cond.Wait()
			continue
		}
		delete(l.conns, oldest)
		oldest.Close()
	}
	if l.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	l.conns[c] = &connInfo{idle: true, since: time.Now()}
	return c, nil
}

// Close closes the listener and ends a wait in Accept.
func (l *connLimit) Close() error {
	l.mu.Lock()
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// state follows the connections' states (http.Server.ConnState).
func (l *connLimit) state(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	info, ok := l.conns[c]
	if !ok {
		return
	}
	switch st {
	case http.StateNew, http.StateIdle:
		info.idle, info.since = true, time.Now()
	case http.StateActive:
		info.idle = false
		return
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
	}
	l.cond.Broadcast()
}
