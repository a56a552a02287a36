package member

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"time"

	gcv1 "github.com/groupcoord/groupcoord/gen/go/groupcoord/v1"
	"google.golang.org/grpc"
)

// ErrClosed: the member has left the group (Close, or the end of Start's context).
var ErrClosed = errors.New("member: closed")

// backoff: exponential from 100 ms to 5 s, each wait drawn uniformly from [d/2, d].
type backoff struct {
	d, min, max time.Duration
}

func newBackoff() *backoff {
	return &backoff{min: 100 * time.Millisecond, max: 5 * time.Second}
}

func (b *backoff) next() time.Duration {
	if b.d == 0 {
		b.d = b.min
	} else {
		b.d = min(2*b.d, b.max)
	}
	half := b.d / 2
	return half + rand.N(half+1)
}

func (b *backoff) reset() { b.d = 0 }

// sleep for d; false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (m *Member) conn(addr string) (*grpc.ClientConn, error) {
	if m.cfg.Dial != nil {
		return m.cfg.Dial(addr)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.conns[addr]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(m.creds))
	if err != nil {
		return nil, err
	}
	m.conns[addr] = c
	return c, nil
}

func (m *Member) reqContext() *gcv1.RequestContext {
	return &gcv1.RequestContext{ClientId: m.cfg.ClientID}
}

// coordinator: the address of the group's coordinator, asking FindCoordinator on the
// bootstrap addresses in turn when it is not known.
func (m *Member) coordinator(ctx context.Context) (string, error) {
	m.mu.Lock()
	addr, start := m.coord, m.next
	m.mu.Unlock()
	if addr != "" {
		return addr, nil
	}
	var last error
	n := len(m.cfg.Bootstrap)
	for i := range n {
		boot := m.cfg.Bootstrap[(start+i)%n]
		addr, err := m.find(ctx, boot)
		if err == nil {
			m.mu.Lock()
			m.coord = addr
			m.mu.Unlock()
			return addr, nil
		}
		last = fmt.Errorf("FindCoordinator on %s: %w", boot, err)
		if ctx.Err() != nil {
			break
		}
	}
	m.mu.Lock()
	m.next = (start + 1) % n // the next search starts elsewhere
	m.mu.Unlock()
	return "", last
}

func (m *Member) find(ctx context.Context, boot string) (string, error) {
	c, err := m.conn(boot)
	if err != nil {
		return "", err
	}
	rctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
	defer cancel()
	start := time.Now()
	resp, err := gcv1.NewGroupCoordinatorClient(c).FindCoordinator(rctx, &gcv1.FindCoordinatorRequest{
		KeyType: 0, CoordinatorKeys: []string{m.cfg.GroupID}, Context: m.reqContext()})
	m.observe("FindCoordinator", start, err)
	if err != nil {
		return "", err
	}
	for _, co := range resp.GetCoordinators() {
		if co.GetKey() != m.cfg.GroupID {
			continue
		}
		if co.GetErrorCode() != 0 {
			return "", &Error{Op: "FindCoordinator", Code: co.GetErrorCode(), Message: co.GetErrorMessage()}
		}
		return net.JoinHostPort(co.GetHost(), strconv.Itoa(int(co.GetPort()))), nil
	}
	return "", &Error{Op: "FindCoordinator", Code: CodeCoordinatorNotAvailable,
		Message: "no coordinator for the group in the answer"}
}

// Call is one RPC attempt of the member, as Config.Observe is told of it.
type Call struct {
	// RPC: ConsumerGroupHeartbeat, OffsetCommit, OffsetFetch, ConsumerGroupDescribe,
	// FindCoordinator, DescribeTopics, ConsumerGroupPrepareAssignment or
	// ConsumerGroupInstallAssignment.
	RPC   string
	Start time.Time
	Took  time.Duration
	// Err: nil when the coordinator answered without an error; an *Error (ErrorCode) for the
	// answer's error code (the whole RPC's, or a routing code of a partition of a commit);
	// otherwise the transport's error (a gRPC status, a timeout). A retried call is told of
	// once per attempt.
	Err error
}

func (m *Member) observe(op string, start time.Time, err error) {
	if m.cfg.Observe != nil {
		m.cfg.Observe(Call{RPC: op, Start: start, Took: time.Since(start), Err: err})
	}
}

// forget the coordinator at addr (it moved, or is unreachable): the next call finds it again.
func (m *Member) forget(addr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.coord == addr {
		m.coord = ""
	}
}

// call runs fn against the group's coordinator until it succeeds or fails for a reason
// other than routing: on a routing error code (fn returns it as an *Error) or a transport
// error it forgets the coordinator, waits (bounded exponential backoff) and tries again,
// until ctx ends. Each attempt is bounded by Config.RequestTimeout.
func (m *Member) call(ctx context.Context, op string, fn func(ctx context.Context, c *grpc.ClientConn) error) error {
	select {
	case <-m.done:
		return ErrClosed
	default:
	}
	b := newBackoff()
	for {
		addr, err := m.coordinator(ctx)
		if err == nil {
			var c *grpc.ClientConn
			if c, err = m.conn(addr); err == nil {
				rctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
				start := time.Now()
				err = fn(rctx, c)
				cancel()
				m.observe(op, start, err)
				if err == nil {
					return nil
				}
			}
			if retriable(err) {
				m.forget(addr)
			}
		}
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), err)
		}
		if !retriable(err) {
			return err
		}
		if !sleep(ctx, b.next()) {
			return errors.Join(ctx.Err(), err)
		}
	}
}
