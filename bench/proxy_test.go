package bench

import (
	"io"
	"net"
	"sync"
	"testing"
)

// countingProxy sits between the driver and MariaDB and records the
// commands clients send: a packet with sequence id 0 starts a command, and
// each command is one round trip (COM_STMT_CLOSE and COM_QUIT get no
// answer and are not counted). With the project's interpolated parameters
// every statement is a COM_QUERY whose text is the full SQL with its values.
type countingProxy struct {
	ln       net.Listener
	upstream string

	mu      sync.Mutex
	armed   bool
	trips   int
	queries []string
}

func newCountingProxy(t testing.TB, upstream string) *countingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{ln: ln, upstream: upstream}
	t.Cleanup(func() { ln.Close() })
	go p.serve()
	return p
}

func (p *countingProxy) addr() string { return p.ln.Addr().String() }

func (p *countingProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", p.upstream)
			if err != nil {
				return
			}
			defer u.Close()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
			p.pipe(c, u)
		}()
	}
}

// pipe forwards client packets to the server, noting each command.
func (p *countingProxy) pipe(from io.Reader, to io.Writer) {
	hdr := make([]byte, 4)
	for {
		if _, err := io.ReadFull(from, hdr); err != nil {
			return
		}
		n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
		payload := make([]byte, n)
		if _, err := io.ReadFull(from, payload); err != nil {
			return
		}
		if hdr[3] == 0 && n > 0 {
			p.note(payload)
		}
		if _, err := to.Write(append(hdr, payload...)); err != nil {
			return
		}
		hdr = make([]byte, 4)
	}
}

const (
	comQuit      = 0x01
	comQuery     = 0x03
	comStmtClose = 0x19
)

func (p *countingProxy) note(payload []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.armed {
		return
	}
	switch payload[0] {
	case comQuit, comStmtClose:
		return
	case comQuery:
		p.queries = append(p.queries, string(payload[1:]))
	}
	p.trips++
}

// capture records the commands of fn.
func (p *countingProxy) capture(fn func() error) (trips int, queries []string, err error) {
	p.mu.Lock()
	p.armed, p.trips, p.queries = true, 0, nil
	p.mu.Unlock()
	err = fn()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = false
	return p.trips, p.queries, err
}
