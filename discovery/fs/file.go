package fs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// jsonFile is one JSON document on disk, read whole and replaced whole.
type jsonFile struct {
	path string
	mu   sync.Mutex // orders writers of this process; the flock orders processes
}

// read decodes the file into v. A missing or empty file leaves v as is.
func (f *jsonFile) read(v any) error {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(b) == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("fs discovery: %s: %w", f.path, err)
	}
	return nil
}

// update reads the file into v under the lock, lets change edit v, and
// writes v back atomically. change returning an error writes nothing.
func (f *jsonFile) update(v any, change func() error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
		return err
	}
	unlock, err := lockFile(f.path + ".lock")
	if err != nil {
		return fmt.Errorf("fs discovery: lock %s: %w", f.path, err)
	}
	defer unlock()
	if err := f.read(v); err != nil {
		return err
	}
	if err := change(); err != nil {
		return err
	}
	return f.replace(v)
}

// replace writes v to a temporary file beside the target and renames it
// over the target, so a reader sees the old file or the new one, whole.
func (f *jsonFile) replace(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.path), filepath.Base(f.path)+".tmp.*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), f.path)
}
