package fs

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/velo-go/velo/ext"
)

// serviceKey names one entry of the service file.
type serviceKey struct {
	service string
	id      ext.InstanceID
}

// liveDir holds one lock file per entry that this module wrote, beside
// the service file.
func (d *Services) liveDir() string { return d.f.path + ".live" }

// livePath is the lock file of one entry. The id comes first, so that no
// service name (escaped as a path segment) can reach outside liveDir.
func (d *Services) livePath(service, id string) string {
	return filepath.Join(d.liveDir(), id+"-"+url.PathEscape(service)+".lock")
}

// hold takes the liveness lock of an entry before the entry is written,
// so that no reader ever sees the entry without its lock held.
func (d *Services) hold(service string, id ext.InstanceID) error {
	key := serviceKey{service, id}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held[key] != nil {
		return nil
	}
	if err := os.MkdirAll(d.liveDir(), 0o755); err != nil {
		return err
	}
	release, err := holdFile(d.livePath(service, id.String()))
	if err != nil {
		return fmt.Errorf("fs discovery: register %s in %q: %w", id, service, err)
	}
	d.held[key] = release
	return nil
}

// release drops the lock of an entry once the entry is gone.
func (d *Services) release(service string, id ext.InstanceID) {
	key := serviceKey{service, id}
	d.mu.Lock()
	release := d.held[key]
	delete(d.held, key)
	d.mu.Unlock()
	if release != nil {
		release()
	}
}

// readLive reads the file without the entries whose process died (their
// lock could be taken), and removes those entries from the file.
func (d *Services) readLive() (serviceFile, error) {
	var sf serviceFile
	if err := d.f.read(&sf); err != nil {
		return sf, err
	}
	type dead struct {
		service, id string
		reap        func()
	}
	var gone []dead
	for service, ids := range sf.Services {
		for _, id := range ids {
			if held, reap := heldBy(d.livePath(service, id)); !held {
				gone = append(gone, dead{service, id, reap})
			}
		}
	}
	if len(gone) == 0 {
		return sf, nil
	}
	for _, g := range gone {
		removeEntry(&sf, g.service, g.id)
	}
	// Each dead lock is ours until reaped, so no one can take the entry
	// over meanwhile: prune them from the file, then drop their files.
	var onDisk serviceFile
	err := d.f.update(&onDisk, func() error {
		for _, g := range gone {
			removeEntry(&onDisk, g.service, g.id)
		}
		return nil
	})
	for _, g := range gone {
		g.reap()
	}
	_ = err // the list is right without the prune; the next reader tries again
	return sf, nil
}
