package meshd

import (
	"os"
	"testing"
)

// CrashBeforeMark makes every mark under stateDir call crash first: a
// non-nil error from it stands for the process dying after the handler
// succeeded and before the mark was durable. Tests using it do not run in
// parallel.
func CrashBeforeMark(t testing.TB, stateDir string, crash func(seq int64) error) {
	crashBeforeMark = func(dir string, seq int64) error {
		if dir != stateDir {
			return nil
		}
		return crash(seq)
	}
	t.Cleanup(func() { crashBeforeMark = nil })
}

// OnStateSync calls done after every completed fdatasync of a state file
// (of any agent) until the test ends. Tests using it do not run in parallel.
func OnStateSync(t testing.TB, done func()) {
	old := syncState
	syncState = func(f *os.File) error {
		err := old(f)
		done()
		return err
	}
	t.Cleanup(func() { syncState = old })
}
