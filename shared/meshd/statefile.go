package meshd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/statedir"
)

// The state file holds two fixed-size slots. Save rewrites, in place, the
// slot that does not hold the newest valid record and makes it durable with
// one fdatasync: a crash mid-write tears at most that slot, whose checksum
// then fails, and Load falls back to the other one.
const (
	stateSlotSize  = 512 // one sector: a slot never shares a sector with the other
	stateFileSize  = 2 * stateSlotSize
	stateMagic     = "MSD1"
	maxStateAgent  = 64  // mesh.AgentIDPattern's bound
	maxStateTopic  = 249 // Kafka's bound on a topic name
	stateFlagLast  = 1 << 0
	stateFlagUpd   = 1 << 1
	stateHeaderLen = 4 + 8 + 8 + 8 + 4 + 8 + 4 + 8 + 4 + 1 + 1 + 1
	stateBodyLen   = stateHeaderLen + maxStateAgent + maxStateTopic
	// The latest loss follows the topic: from, to, total, at (seconds,
	// nanoseconds). All zero when none; a file written before it existed
	// has zeros there, and an older meshd ignores these bytes.
	stateLostAt  = stateBodyLen
	stateLostLen = 8 + 8 + 8 + 8 + 4
)

// The record must fit its slot with room for the checksum.
var _ = [stateSlotSize - stateBodyLen - stateLostLen - 4]struct{}{}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeSlot writes s with generation gen into buf (one slot). Fields that
// do not fit are an error, never truncated: a truncated topic would resume
// from another topic's offset.
func encodeSlot(buf []byte, gen uint64, s State) error {
	if !mesh.ValidAgentID(s.AgentID) || len(s.AgentID) > maxStateAgent {
		return fmt.Errorf("meshd: invalid agent id %q", s.AgentID)
	}
	if len(s.Topic) > maxStateTopic {
		return fmt.Errorf("meshd: topic name of %d bytes does not fit the state record (at most %d)", len(s.Topic), maxStateTopic)
	}
	if s.LastSeq < 0 || s.Offset < -1 {
		return fmt.Errorf("meshd: impossible state (last_seq %d, offset %d)", s.LastSeq, s.Offset)
	}
	clear(buf[:stateSlotSize])
	le := binary.LittleEndian
	copy(buf[0:4], stateMagic)
	le.PutUint64(buf[4:], gen)
	le.PutUint64(buf[12:], uint64(s.LastSeq))
	le.PutUint64(buf[20:], uint64(s.Offset))
	le.PutUint32(buf[28:], uint32(s.Partition))
	var flags byte
	if !s.LastAt.IsZero() {
		flags |= stateFlagLast
		le.PutUint64(buf[32:], uint64(s.LastAt.Unix()))
		le.PutUint32(buf[40:], uint32(s.LastAt.Nanosecond()))
	}
	if !s.UpdatedAt.IsZero() {
		flags |= stateFlagUpd
		le.PutUint64(buf[44:], uint64(s.UpdatedAt.Unix()))
		le.PutUint32(buf[52:], uint32(s.UpdatedAt.Nanosecond()))
	}
	buf[56] = flags
	buf[57] = byte(len(s.AgentID))
	buf[58] = byte(len(s.Topic))
	copy(buf[stateHeaderLen:], s.AgentID)
	copy(buf[stateHeaderLen+maxStateAgent:], s.Topic)
	if l := s.Lost; l.Total > 0 {
		le.PutUint64(buf[stateLostAt:], uint64(l.FromSeq))
		le.PutUint64(buf[stateLostAt+8:], uint64(l.ToSeq))
		le.PutUint64(buf[stateLostAt+16:], uint64(l.Total))
		le.PutUint64(buf[stateLostAt+24:], uint64(l.At.Unix()))
		le.PutUint32(buf[stateLostAt+32:], uint32(l.At.Nanosecond()))
	}
	le.PutUint32(buf[stateSlotSize-4:], crc32.Checksum(buf[:stateSlotSize-4], castagnoli))
	return nil
}

// decodeSlot reads one slot; ok is false for a torn, corrupt or impossible
// record (bad magic, bad checksum, lengths or values out of range).
func decodeSlot(buf []byte) (s State, gen uint64, ok bool) {
	le := binary.LittleEndian
	if len(buf) < stateSlotSize || string(buf[0:4]) != stateMagic ||
		le.Uint32(buf[stateSlotSize-4:]) != crc32.Checksum(buf[:stateSlotSize-4], castagnoli) {
		return State{}, 0, false
	}
	gen = le.Uint64(buf[4:])
	flags, agentLen, topicLen := buf[56], int(buf[57]), int(buf[58])
	if agentLen > maxStateAgent || topicLen > maxStateTopic || flags&^(stateFlagLast|stateFlagUpd) != 0 {
		return State{}, 0, false
	}
	s = State{
		AgentID:   string(buf[stateHeaderLen : stateHeaderLen+agentLen]),
		LastSeq:   int64(le.Uint64(buf[12:])),
		Offset:    int64(le.Uint64(buf[20:])),
		Partition: int32(le.Uint32(buf[28:])),
		Topic:     string(buf[stateHeaderLen+maxStateAgent : stateHeaderLen+maxStateAgent+topicLen]),
	}
	if flags&stateFlagLast != 0 {
		s.LastAt = time.Unix(int64(le.Uint64(buf[32:])), int64(le.Uint32(buf[40:]))).UTC()
	}
	if flags&stateFlagUpd != 0 {
		s.UpdatedAt = time.Unix(int64(le.Uint64(buf[44:])), int64(le.Uint32(buf[52:]))).UTC()
	}
	if total := int64(le.Uint64(buf[stateLostAt+16:])); total > 0 {
		s.Lost = LostEvents{
			FromSeq: int64(le.Uint64(buf[stateLostAt:])), ToSeq: int64(le.Uint64(buf[stateLostAt+8:])), Total: total,
			At: time.Unix(int64(le.Uint64(buf[stateLostAt+24:])), int64(le.Uint32(buf[stateLostAt+32:]))).UTC(),
		}
	}
	if s.LastSeq < 0 || s.Offset < -1 || !mesh.ValidAgentID(s.AgentID) ||
		le.Uint32(buf[40:]) >= 1e9 || le.Uint32(buf[52:]) >= 1e9 || le.Uint32(buf[stateLostAt+32:]) >= 1e9 ||
		s.Lost.Count() > s.Lost.Total {
		return State{}, 0, false
	}
	return s, gen, true
}

// stateFile is the state of one agent held open for a run: each Save is one
// WriteAt and one fdatasync. Its owner holds the agent's state lock; the
// file is created (temp file, fsync, rename, directory fsync) by the first
// Save, so a run that handles nothing leaves no state behind.
type stateFile struct {
	dir, agentID string
	f            *os.File // nil until the file exists
	gen          uint64   // generation of the newest valid slot
	slot         int      // the slot holding it
	buf          [stateSlotSize]byte
	broken       error // a failed write or sync: the page cache can no longer be trusted
}

// openStateFile loads the state of agentID from dir. An old-format JSON
// state is converted: the new file is written durably first, then the old
// one removed, so a crash in between leaves the new file, which wins. The
// caller must hold the agent's state lock.
func openStateFile(dir, agentID string) (*stateFile, State, error) {
	if !mesh.ValidAgentID(agentID) {
		return nil, State{}, fmt.Errorf("meshd: invalid agent id %q", agentID)
	}
	sf := &stateFile{dir: dir, agentID: agentID}
	path := StatePath(dir, agentID)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		s, found, err := loadLegacyState(dir, agentID)
		if err != nil || !found {
			return sf, s, err
		}
		if err := sf.create(s); err != nil {
			return nil, State{}, err
		}
		if err := removeLegacyState(dir, agentID); err != nil {
			sf.Close()
			return nil, State{}, err
		}
		return sf, s, nil
	}
	if err != nil {
		return nil, State{}, fmt.Errorf("meshd: open state: %w", err)
	}
	s, gen, slot, err := readStateSlots(f, path, agentID)
	if err != nil {
		_ = f.Close()
		return nil, State{}, err
	}
	sf.f, sf.gen, sf.slot = f, gen, slot
	// A leftover of a conversion that crashed after the new file was made.
	if err := removeLegacyState(dir, agentID); err != nil {
		sf.Close()
		return nil, State{}, err
	}
	return sf, s, nil
}

// readStateSlots reads both slots of an open state file and returns the
// valid one with the higher generation. Both bad is an error naming the
// file, never a reset, which would run the handler again for everything.
func readStateSlots(f io.ReaderAt, path, agentID string) (State, uint64, int, error) {
	var buf [stateFileSize]byte
	n, err := f.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return State{}, 0, 0, fmt.Errorf("meshd: read state: %w", err)
	}
	best, bestGen, bestSlot := State{}, uint64(0), -1
	for i := range 2 {
		if n < (i+1)*stateSlotSize {
			continue
		}
		s, gen, ok := decodeSlot(buf[i*stateSlotSize : (i+1)*stateSlotSize])
		if ok && (bestSlot < 0 || gen > bestGen) {
			best, bestGen, bestSlot = s, gen, i
		}
	}
	if bestSlot < 0 {
		return State{}, 0, 0, fmt.Errorf("meshd: state file %s is corrupt (no valid record in either slot); move it away to start over", path)
	}
	if best.AgentID != agentID {
		return State{}, 0, 0, fmt.Errorf("meshd: state file %s belongs to agent %q, not %q", path, best.AgentID, agentID)
	}
	return best, bestGen, bestSlot, nil
}

// create writes the file whole (both slots, slot 0 newest) through
// statedir, durably and private from its first byte, then opens it.
func (sf *stateFile) create(s State) error {
	var data [stateFileSize]byte
	if err := encodeSlot(data[:stateSlotSize], 1, s); err != nil {
		return err
	}
	if err := encodeSlot(data[stateSlotSize:], 0, s); err != nil {
		return err
	}
	path := StatePath(sf.dir, sf.agentID)
	if err := statedir.Put(sf.dir, filepath.Base(path), data[:]); err != nil {
		return fmt.Errorf("meshd: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("meshd: open state: %w", err)
	}
	sf.f, sf.gen, sf.slot = f, 1, 0
	return nil
}

// Save makes s the state on disk: one WriteAt of the slot the newest
// record is not in and one fdatasync, done when Save returns. Until the
// sync ends the other slot holds the record before; a torn write is
// detected on load by its checksum. After a failed write or sync the page
// cache can no longer be trusted: every later Save fails.
func (sf *stateFile) Save(s State) error {
	if sf.broken != nil {
		return sf.broken
	}
	if s.AgentID != sf.agentID {
		return fmt.Errorf("meshd: state of agent %q saved to the file of %q", s.AgentID, sf.agentID)
	}
	if sf.f == nil {
		return sf.create(s)
	}
	next := 1 - sf.slot
	if err := encodeSlot(sf.buf[:], sf.gen+1, s); err != nil {
		return err
	}
	if _, err := sf.f.WriteAt(sf.buf[:], int64(next*stateSlotSize)); err != nil {
		sf.broken = fmt.Errorf("meshd: write state: %w", err)
		return sf.broken
	}
	if err := syncState(sf.f); err != nil {
		sf.broken = fmt.Errorf("meshd: sync state: %w", err)
		return sf.broken
	}
	sf.gen, sf.slot = sf.gen+1, next
	return nil
}

// syncState makes a state write durable; tests replace it to watch or fail
// the syncs.
var syncState = datasync

var errStateClosed = errors.New("meshd: state file closed")

// Close releases the file; a closed stateFile may be reopened, not reused.
func (sf *stateFile) Close() error {
	if sf == nil || sf.f == nil {
		return nil
	}
	err := sf.f.Close()
	sf.f, sf.broken = nil, errStateClosed
	return err
}

// legacyStatePath is where meshd kept its state as JSON before the slotted
// file: read and converted, never written.
func legacyStatePath(dir, agentID string) string {
	return filepath.Join(dir, agentID+".state.json")
}

func loadLegacyState(dir, agentID string) (State, bool, error) {
	var s State
	path := legacyStatePath(dir, agentID)
	found, err := ReadAgentFile("meshd", "state", path, agentID, &s, func() string { return s.AgentID })
	if err != nil {
		return State{}, false, err
	}
	if !found {
		return State{AgentID: agentID, Offset: -1}, false, nil
	}
	if s.LastSeq < 0 || s.Offset < -1 {
		return State{}, false, fmt.Errorf("meshd: state file %s holds impossible values (last_seq %d, offset %d)", path, s.LastSeq, s.Offset)
	}
	return s, true, nil
}

func removeLegacyState(dir, agentID string) error {
	err := os.Remove(legacyStatePath(dir, agentID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("meshd: remove the converted old state: %w", err)
	}
	return statedir.SyncDir(dir)
}
