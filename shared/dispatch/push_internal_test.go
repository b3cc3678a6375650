package dispatch

import (
	"context"
	"sync"
	"testing"
)

// stuckPusher holds every Push until release is closed, after signalling
// entered, and counts the records it was handed.
type stuckPusher struct {
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	handed  int
}

func (p *stuckPusher) Push(string, int64, []byte) {
	select {
	case p.entered <- struct{}{}:
	default:
	}
	<-p.release
	p.mu.Lock()
	p.handed++
	p.mu.Unlock()
}

func (p *stuckPusher) Drain(context.Context) {}

// TestThePushHandoffIsBoundedByBytes: batches of large records wait in the
// handoff up to PushHandoffBytes of values, far fewer than
// PushHandoffBatches; past that they are dropped, so a stuck Pusher cannot
// take the dispatcher's memory. A batch larger than the bound alone still
// passes an empty handoff.
func TestThePushHandoffIsBoundedByBytes(t *testing.T) {
	const quarter = PushHandoffBytes / 4
	batch := func(seq int64, size int) []pushed {
		return []pushed{{agentID: "bob", seq: seq, value: make([]byte, size)}}
	}
	t.Run("past PushHandoffBytes of waiting values, batches are dropped", func(t *testing.T) {
		p := &stuckPusher{entered: make(chan struct{}, 1), release: make(chan struct{})}
		d := &Dispatcher{Pusher: p}
		if n := d.push(batch(1, quarter)); n != 0 {
			t.Fatalf("the first batch was dropped (%d)", n)
		}
		<-p.entered // batch 1 is in Push, out of the handoff
		dropped := 0
		for seq := int64(2); seq <= 8; seq++ { // 4 quarters fit, 3 do not
			dropped += d.push(batch(seq, quarter))
		}
		close(p.release)
		d.drainPushes(context.Background())
		if dropped != 3 || p.handed != 5 {
			t.Fatalf("dropped %d, handed %d; want 3 dropped past the byte bound and 5 handed over", dropped, p.handed)
		}
	})
	t.Run("a batch larger than the bound passes an empty handoff", func(t *testing.T) {
		p := &stuckPusher{entered: make(chan struct{}, 1), release: make(chan struct{})}
		close(p.release)
		d := &Dispatcher{Pusher: p}
		if n := d.push(batch(1, PushHandoffBytes+1)); n != 0 {
			t.Fatalf("a lone large batch was dropped (%d)", n)
		}
		d.drainPushes(context.Background())
		if p.handed != 1 {
			t.Fatalf("handed %d, want the large batch", p.handed)
		}
	})
}
