package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// forwardedSignals are passed on to the command's process group.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// signalError is the cause of a claim cancelled by a signal.
type signalError struct{ sig os.Signal }

func (e *signalError) Error() string { return "interrupted by " + signalName(e.sig) }

// signalName is "SIGTERM" rather than "terminated" for the signals exec
// forwards.
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return sig.String()
}

// forwarder routes the signals exec receives: before the command starts,
// to cancelling the claim; while it runs, to its process group.
type forwarder struct {
	cancel context.CancelCauseFunc // cancels the claim
	// stopping receives SIGINT or SIGTERM once one has been passed on to
	// the running command: exec then stops its group.
	stopping chan os.Signal

	mu   sync.Mutex // protects the fields below
	p    *proc      // the started command, nil before the start
	done bool       // the command has exited
}

// newForwarder returns a forwarder that cancels the claim with cancel.
func newForwarder(cancel context.CancelCauseFunc) *forwarder {
	return &forwarder{cancel: cancel, stopping: make(chan os.Signal, 1)}
}

// listen relays the signals exec gets to f until stop is called.
func (f *forwarder) listen() (stop func()) {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwardedSignals...)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { f.loop(sigs, done) })
	return func() {
		signal.Stop(sigs)
		close(done)
		wg.Wait()
	}
}

// loop handles signals until done is closed.
func (f *forwarder) loop(sigs <-chan os.Signal, done <-chan struct{}) {
	for {
		select {
		case sig := <-sigs:
			f.mu.Lock()
			switch {
			case f.done:
			case f.p != nil:
				_ = f.p.signal(sig)
				if sig == syscall.SIGINT || sig == syscall.SIGTERM {
					select {
					case f.stopping <- sig:
					default:
					}
				}
			default:
				f.cancel(&signalError{sig})
			}
			f.mu.Unlock()
		case <-done:
			return
		}
	}
}

// start starts p unless ctx has ended (a signal came first, or the run
// was lost already), which it reports as cause. A signal that arrives
// while it starts p is forwarded once the command runs.
func (f *forwarder) start(ctx context.Context, p *proc) (startErr, cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	if err := p.start(); err != nil {
		return err, nil
	}
	f.p = p
	return nil, nil
}

// signal sends sig to the command's process group, if it is running.
func (f *forwarder) signal(sig os.Signal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.p != nil && !f.done {
		_ = f.p.signal(sig)
	}
}

// exited stops the forwarding.
func (f *forwarder) exited() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = true
}
