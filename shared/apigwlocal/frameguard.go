package apigwlocal

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/coder/websocket"
)

// guardWriter hands websocket.Accept a hijacked connection wrapped in a
// frameGuard, so that the gateway sees every frame header the client sends.
type guardWriter struct {
	http.ResponseWriter
	newGuard func(net.Conn, []byte) *frameGuard
	guard    *frameGuard
}

// Hijack implements http.Hijacker.
func (g *guardWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(g.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	// Bytes the server read past the handshake belong to the first frames.
	buffered, _ := brw.Reader.Peek(brw.Reader.Buffered())
	g.guard = g.newGuard(conn, bytes.Clone(buffered))
	brw.Reader.Reset(g.guard)
	return g.guard, brw, nil
}

// Unwrap lets http.ResponseController reach the server's writer.
func (g *guardWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// frameGuard sits between a client's TCP stream and the WebSocket library
// and enforces what the library cannot: API Gateway's per-frame limit, its
// per-message limit counted on the wire, and its refusal of binary frames.
// It also reports activity (any bytes, control frames included) for the
// idle timeout.
//
// A frame that breaks a rule is never passed on: in its place the library
// reads a close frame carrying the gateway's code and reason, which it
// answers, as RFC 6455 asks, by echoing that code and reason to the client
// and closing. The gateway then reads the status from Tripped.
type frameGuard struct {
	net.Conn
	src        io.Reader
	maxFrame   int64
	maxMessage int64
	onActivity func()

	buf         []byte
	out         []byte // bytes checked and not yet returned
	off         int
	hdr         [14]byte
	hdrLen      int
	payloadLeft int64
	msgBytes    int64

	mu      sync.Mutex
	tripped *closeStatus
}

// closeStatus is a close code and reason of the gateway's own.
type closeStatus struct {
	Code   websocket.StatusCode
	Reason string
}

func newFrameGuard(conn net.Conn, prefix []byte, maxFrame, maxMessage int64, onActivity func()) *frameGuard {
	return &frameGuard{
		Conn: conn, src: io.MultiReader(bytes.NewReader(prefix), conn),
		maxFrame: maxFrame, maxMessage: maxMessage, onActivity: onActivity,
		buf: make([]byte, 4096),
	}
}

// Tripped returns the close status the guard imposed, if it did.
func (g *frameGuard) Tripped() *closeStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.tripped
}

// Read implements net.Conn: it returns only bytes of frames that passed.
func (g *frameGuard) Read(p []byte) (int, error) {
	for g.off == len(g.out) {
		if g.Tripped() != nil {
			return 0, io.EOF
		}
		g.out, g.off = g.out[:0], 0
		n, err := g.src.Read(g.buf)
		if n > 0 {
			if g.onActivity != nil {
				g.onActivity()
			}
			g.feed(g.buf[:n])
		}
		if err != nil && g.off == len(g.out) {
			return 0, err
		}
	}
	n := copy(p, g.out[g.off:])
	g.off += n
	return n, nil
}

// feed checks b, the next bytes of the stream, frame by frame; a frame
// header is held back until it is complete and has passed.
func (g *frameGuard) feed(b []byte) {
	for len(b) > 0 && g.Tripped() == nil {
		if g.payloadLeft > 0 {
			n := min(int64(len(b)), g.payloadLeft)
			g.out = append(g.out, b[:n]...)
			g.payloadLeft -= n
			b = b[n:]
			continue
		}
		g.hdr[g.hdrLen] = b[0]
		g.hdrLen++
		b = b[1:]
		need := frameHeaderLen(g.hdr[:g.hdrLen])
		if need == 0 || g.hdrLen < need {
			continue
		}
		opcode, length := g.hdr[0]&0x0f, framePayloadLen(g.hdr[:g.hdrLen])
		if status := g.check(opcode, length); status != nil {
			g.trip(*status)
			return
		}
		g.out = append(g.out, g.hdr[:g.hdrLen]...)
		g.payloadLeft = length
		g.hdrLen = 0
	}
}

// check applies API Gateway's rules to one frame header.
func (g *frameGuard) check(opcode byte, length int64) *closeStatus {
	const continuation, text, binaryFrame = 0x0, 0x1, 0x2
	switch opcode {
	case binaryFrame:
		return &closeStatus{websocket.StatusUnsupportedData, "binary frames are not supported; send text"}
	case text:
		g.msgBytes = 0
	case continuation:
	default:
		return nil // control frames are the library's business (at most 125 bytes)
	}
	if length > g.maxFrame {
		return &closeStatus{websocket.StatusMessageTooBig, fmt.Sprintf("frame too big: the limit is %d bytes", g.maxFrame)}
	}
	g.msgBytes += length
	if g.msgBytes > g.maxMessage {
		return &closeStatus{websocket.StatusMessageTooBig, fmt.Sprintf("message too big: the limit is %d bytes", g.maxMessage)}
	}
	return nil
}

// trip records st and queues, in place of the offending frame, a masked
// close frame carrying it (mask key zero, so the payload is as written).
func (g *frameGuard) trip(st closeStatus) {
	payload := binary.BigEndian.AppendUint16(nil, uint16(st.Code))
	payload = append(payload, truncateReason(st.Reason)...)
	g.out = append(g.out, 0x88, 0x80|byte(len(payload)), 0, 0, 0, 0)
	g.out = append(g.out, payload...)
	g.mu.Lock()
	g.tripped = &st
	g.mu.Unlock()
}

// frameHeaderLen is the length of the header starting h, or 0 while its
// first two bytes are not known.
func frameHeaderLen(h []byte) int {
	if len(h) < 2 {
		return 0
	}
	n := 2
	switch h[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if h[1]&0x80 != 0 {
		n += 4
	}
	return n
}

// framePayloadLen reads the payload length of a complete header.
func framePayloadLen(h []byte) int64 {
	switch l := h[1] & 0x7f; l {
	case 126:
		return int64(binary.BigEndian.Uint16(h[2:4]))
	case 127:
		n := binary.BigEndian.Uint64(h[2:10])
		if n > 1<<62 {
			return 1 << 62
		}
		return int64(n)
	default:
		return int64(l)
	}
}

// truncateReason keeps a close reason within the 123 bytes a close frame
// allows.
func truncateReason(s string) string {
	if len(s) > 123 {
		return s[:123]
	}
	return s
}
