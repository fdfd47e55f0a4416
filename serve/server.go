package serve

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"

	"golang.org/x/net/netutil"
)

// Serve answers the API on ln until ctx is done or the listener fails.
// Clients are bounded as Config says: header, body and keep-alive
// timeouts, a minimum upload rate and at most MaxConns connections.
//
// When ctx is done the worker stops first: no queued task starts, and the
// running one is interrupted (it runs again at the next start), so that a
// slow client cannot keep the device busy past a SIGTERM. Then the
// requests in flight get DrainTimeout to finish. Close the Service after
// Serve returns.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(netutil.LimitListener(ln, s.cfg.MaxConns)) }()
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
