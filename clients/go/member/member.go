// Package member is a KIP-848 consumer-group member on groupcoord's gRPC API: it joins a
// group through ConsumerGroupHeartbeat, heartbeats at the interval the coordinator returns,
// reconciles its assignment (revoke before assign, waiting for the callbacks), rejoins at
// epoch 0 with the same member id when fenced, follows the group to its coordinator
// (FindCoordinator, re-found on NOT_COORDINATOR and transport errors with bounded backoff),
// commits and fetches offsets as the member, computes the group's target when it declares
// a client-side assignor and is chosen, and leaves the group on Close.
//
//	m, err := member.New(member.Config{
//		Bootstrap: []string{"localhost:50051"}, GroupID: "orders", Topics: []string{"orders"},
//		Listener: member.ListenerFuncs{
//			Assigned: func(ctx context.Context, tps []member.TopicPartition) { /* start */ },
//			Revoked:  func(ctx context.Context, tps []member.TopicPartition) { /* commit, stop */ },
//		},
//	})
//	if err != nil { ... }
//	err = m.Run(ctx) // until ctx is cancelled; then it revokes and leaves the group
package member

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	gcv1 "github.com/groupcoord/groupcoord/gen/go/groupcoord/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// TopicPartition is one partition of a topic, by name.
type TopicPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s-%d", tp.Topic, tp.Partition) }

// Listener receives the member's assignment changes. The callbacks run one at a time on the
// member's reconciliation goroutine, beside the heartbeats: a callback may block (e.g. to
// commit) and the member stays in the group, up to the rebalance timeout for a revocation.
// The member waits for each call to return before it goes on: a revocation is reported to
// the coordinator (and the new partitions assigned) only after OnRevoked returned; until
// then the heartbeats report the partitions owned before it. The partitions are sorted by
// topic and partition.
type Listener interface {
	// OnAssigned: partitions added to the member's assignment (called once with an empty
	// list after a join that assigned nothing).
	OnAssigned(ctx context.Context, partitions []TopicPartition)
	// OnRevoked: partitions the member gives up (a rebalance moved them, or Close).
	OnRevoked(ctx context.Context, partitions []TopicPartition)
	// OnLost: partitions the member no longer owns because it was fenced (its session
	// expired or its epoch was stale): another member may already own them.
	OnLost(ctx context.Context, partitions []TopicPartition)
}

// ListenerFuncs is a Listener made of functions; a nil function is not called.
type ListenerFuncs struct {
	Assigned, Revoked, Lost func(ctx context.Context, partitions []TopicPartition)
}

func (l ListenerFuncs) OnAssigned(ctx context.Context, p []TopicPartition) {
	if l.Assigned != nil {
		l.Assigned(ctx, p)
	}
}

func (l ListenerFuncs) OnRevoked(ctx context.Context, p []TopicPartition) {
	if l.Revoked != nil {
		l.Revoked(ctx, p)
	}
}

func (l ListenerFuncs) OnLost(ctx context.Context, p []TopicPartition) {
	if l.Lost != nil {
		l.Lost(ctx, p)
	}
}

// TLSConfig: the CA that signed the servers' certificates, an optional client certificate
// and key (mTLS) and an optional server name to verify instead of the address's host.
type TLSConfig struct {
	CAFile, CertFile, KeyFile, ServerName string
}

// Config of a member. Bootstrap, GroupID and one of Topics or TopicRegex are required.
type Config struct {
	// Bootstrap: gRPC addresses (host:port) of any shards; FindCoordinator is asked there.
	Bootstrap []string
	// TLS: nil = plaintext.
	TLS     *TLSConfig
	GroupID string
	// Topics to subscribe to by name, or TopicRegex (RE2, matched by the coordinator).
	Topics     []string
	TopicRegex string
	// RackID, InstanceID (static membership) and ServerAssignor are optional.
	RackID, InstanceID, ServerAssignor string
	// RebalanceTimeout: how long the coordinator waits for a revocation (default 30 s).
	RebalanceTimeout time.Duration
	// ClientID sent in the request context (default "groupcoord-go-member").
	ClientID string
	// Listener receives assignment changes; nil = none.
	Listener Listener
	// OnError is told of errors the member retries on its own (a static member's instance id
	// in use: UNRELEASED_INSTANCE_ID / FENCED_INSTANCE_ID, an unknown assignor, ...); nil = none.
	OnError func(error)
	// RequestTimeout bounds each RPC (default 5 s).
	RequestTimeout time.Duration
	// Assignors: client-side assignors this member declares, in order of preference
	// (optional; Assignor). Set ServerAssignor to one of their names to ask for it.
	Assignors []Assignor
	// Dial, if set, gives the member its connection to a gRPC address (host:port): the
	// member uses it and does not close it (e.g. one connection per shard shared by many
	// members). nil: the member dials its own, with TLS, and closes them when it has left.
	Dial func(addr string) (*grpc.ClientConn, error)
	// Observe, if set, is told of every RPC attempt the member makes (for metrics: latency,
	// error codes, re-routes). It is called on the member's goroutines and must not block.
	Observe func(Call)
	// LeaveTimeout bounds the leave when the context given to Start is cancelled (default 10 s).
	LeaveTimeout time.Duration
}

// Member is one member of a consumer group. Its methods are safe for concurrent use.
type Member struct {
	cfg   Config
	id    string
	creds credentials.TransportCredentials

	mu         sync.Mutex
	conns      map[string]*grpc.ClientConn
	coord      string // the coordinator's address; "" = find it
	next       int    // the bootstrap address FindCoordinator asks first
	epoch      int32
	owned      []TopicPartition  // what the member owns, as its callbacks said (sorted)
	hbDone     chan struct{}     // closed (and replaced) after each successful heartbeat
	topicNames map[string]string // topic id -> name
	topicIDs   map[string]string // topic name -> id
	started    bool
	closing    bool
	remain     bool // closed by CloseRemainInGroup: no OnRevoked, no leave heartbeat
	computing  bool // a client-side assignment computation is running
	leaveCtx   context.Context

	// reconciliation (loop.go): the heartbeat loop records the coordinator's target, the
	// reconciler goroutine runs the callbacks toward it
	target    []*gcv1.TopicPartitions // the latest assignment, by topic id
	hasTarget bool                    // an assignment arrived since the join
	acked     bool                    // OnAssigned was called since the join
	fenced    bool                    // the loop was fenced: the reconciler calls OnLost
	lostDone  chan struct{}           // closed by the reconciler once OnLost returned
	reconcile chan struct{}           // (1) wakes the reconciler
	beatNow   chan struct{}           // (1) asks the loop for a heartbeat at once

	stop chan struct{} // closed by Close
	done chan struct{} // closed when the loop has left
	err  error         // the leave's error
}

// New checks cfg and makes a member (no connection yet: see Start and Run). Its member id
// is generated here (a random UUID in Kafka's 22-character base64 form) and kept for its
// lifetime, also across fencing.
func New(cfg Config) (*Member, error) {
	if len(cfg.Bootstrap) == 0 {
		return nil, errors.New("member: Config.Bootstrap is empty")
	}
	if cfg.GroupID == "" {
		return nil, errors.New("member: Config.GroupID is empty")
	}
	if (len(cfg.Topics) == 0) == (cfg.TopicRegex == "") {
		return nil, errors.New("member: give Config.Topics or Config.TopicRegex (one of them)")
	}
	if cfg.RebalanceTimeout <= 0 {
		cfg.RebalanceTimeout = 30 * time.Second
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	if cfg.LeaveTimeout <= 0 {
		cfg.LeaveTimeout = 10 * time.Second
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "groupcoord-go-member"
	}
	if cfg.Listener == nil {
		cfg.Listener = ListenerFuncs{}
	}
	cfg.Topics = slices.Clone(cfg.Topics)
	slices.Sort(cfg.Topics)
	creds, err := transportCredentials(cfg.TLS)
	if err != nil {
		return nil, err
	}
	return &Member{
		cfg: cfg, id: newMemberID(), creds: creds,
		conns: map[string]*grpc.ClientConn{}, hbDone: make(chan struct{}),
		reconcile: make(chan struct{}, 1), beatNow: make(chan struct{}, 1),
		topicNames: map[string]string{}, topicIDs: map[string]string{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}, nil
}

func newMemberID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // variant
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func transportCredentials(t *TLSConfig) (credentials.TransportCredentials, error) {
	if t == nil {
		return insecure.NewCredentials(), nil
	}
	conf := &tls.Config{ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("member: TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("member: TLS CA %s: no certificate in it", t.CAFile)
		}
		conf.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("member: TLS client certificate and key go together")
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("member: TLS client certificate: %w", err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(conf), nil
}

// ID is the member id (the same for the member's lifetime).
func (m *Member) ID() string { return m.id }

// Epoch is the member epoch of the last heartbeat (0 before the join completes or after fencing).
func (m *Member) Epoch() int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epoch
}

// Assignment is the partitions the member owns now (as its callbacks said).
func (m *Member) Assignment() []TopicPartition {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.owned)
}

// Start joins the group in the background. When ctx is cancelled the member leaves the group
// as Close does (bounded by Config.LeaveTimeout). Callbacks are given a context with ctx's
// values that is not cancelled with it (the leave's OnRevoked runs after ctx is done).
func (m *Member) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return errors.New("member: already started")
	}
	m.started = true
	go func() {
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.LeaveTimeout)
			defer cancel()
			_ = m.Close(lctx)
		case <-m.done:
		}
	}()
	go m.loop(context.WithoutCancel(ctx))
	return nil
}

// Run is Start, then waiting until ctx is cancelled and the member has left the group. It
// returns the leave's error (nil when the coordinator acknowledged the leave).
func (m *Member) Run(ctx context.Context) error {
	if err := m.Start(ctx); err != nil {
		return err
	}
	<-m.done
	m.closeConns()
	return m.err
}

// Done is closed when the member has left the group (after Close or the cancellation of
// Start's context).
func (m *Member) Done() <-chan struct{} { return m.done }

// Close leaves the group: OnRevoked(owned partitions) first, then a heartbeat with epoch -1
// (-2 for a static member, whose assignment the coordinator keeps for the session timeout),
// then it stops the heartbeat loop and closes the connections. ctx bounds the leave; Close
// waits for a callback in progress to return.
func (m *Member) Close(ctx context.Context) error { return m.close(ctx, false) }

// CloseRemainInGroup stops the member without leaving the group: no OnRevoked, no leave
// heartbeat (Kafka's close with REMAIN_IN_GROUP). The coordinator keeps the member, and its
// partitions, until its session times out, as for a process that died; a static member
// restarted with its instance id within the session takes its assignment back. A callback
// in progress is waited for; calls in flight are abandoned.
func (m *Member) CloseRemainInGroup(ctx context.Context) error { return m.close(ctx, true) }

func (m *Member) close(ctx context.Context, remain bool) error {
	m.mu.Lock()
	if !m.started {
		m.started = true
		close(m.done)
	}
	if !m.closing {
		m.closing, m.remain = true, remain
		m.leaveCtx = ctx
		close(m.stop)
	}
	m.mu.Unlock()
	select {
	case <-m.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	m.closeConns()
	return m.err
}

func (m *Member) closeConns() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for addr, c := range m.conns {
		_ = c.Close()
		delete(m.conns, addr)
	}
	m.coord = ""
}

func (m *Member) report(err error) {
	if m.cfg.OnError != nil && err != nil {
		m.cfg.OnError(err)
	}
}

// subscription: the topics as the coordinator sees them, for error messages.
func (m *Member) subscription() string {
	if m.cfg.TopicRegex != "" {
		return "regex " + m.cfg.TopicRegex
	}
	return strings.Join(m.cfg.Topics, ",")
}
