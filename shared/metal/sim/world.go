package sim

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	"github.com/google/uuid"
)

// record is what every stored object has: its ID, the project it belongs to,
// and its creation time and order (lists are sorted by creation so that pages
// are stable).
type record struct {
	id        string
	projectID string
	seq       int64
	created   time.Time
}

func (r *record) base() *record { return r }

// object is a stored object.
type object interface {
	base() *record
}

// world is the simulator's state. It is normalised: objects refer to each
// other by ID and what the API answers with (a reservation's gateway, a
// VLAN's instances) is derived when rendering. That keeps each change to one
// place, and lets Seed work on a cheap clone.
type world struct {
	seq          int64
	projects     map[string]*project
	keys         map[string]string // project API key -> project ID
	vrfs         map[string]*vrf
	reservations map[string]*reservation
	publicIPs    map[string]*publicIP
	gateways     map[string]*gateway
	vlans        map[string]*virtualNetwork
	devices      map[string]*device
	ports        map[string]*port
	batches      map[string]*batch
	hardware     map[string]*hardwareReservation
}

func newWorld() *world {
	return &world{
		projects:     map[string]*project{},
		keys:         map[string]string{},
		vrfs:         map[string]*vrf{},
		reservations: map[string]*reservation{},
		publicIPs:    map[string]*publicIP{},
		gateways:     map[string]*gateway{},
		vlans:        map[string]*virtualNetwork{},
		devices:      map[string]*device{},
		ports:        map[string]*port{},
		batches:      map[string]*batch{},
		hardware:     map[string]*hardwareReservation{},
	}
}

// clone copies the indexes and shares the objects. Adding objects to the
// clone leaves w untouched, which is all Seed does, so it can build on a
// clone and keep it only if the whole seed applies.
func (w *world) clone() *world {
	c := *w
	c.projects = maps.Clone(w.projects)
	c.keys = maps.Clone(w.keys)
	c.vrfs = maps.Clone(w.vrfs)
	c.reservations = maps.Clone(w.reservations)
	c.publicIPs = maps.Clone(w.publicIPs)
	c.gateways = maps.Clone(w.gateways)
	c.vlans = maps.Clone(w.vlans)
	c.devices = maps.Clone(w.devices)
	c.ports = maps.Clone(w.ports)
	c.batches = maps.Clone(w.batches)
	c.hardware = maps.Clone(w.hardware)
	return &c
}

// store adds obj to m. It keeps an ID set beforehand (seeds give stable IDs)
// or draws a UUID, and stamps the creation time and order. Callers validate
// first: store is the commit.
func store[T object](w *world, m map[string]T, obj T, now time.Time) error {
	rec := obj.base()
	if rec.id == "" {
		rec.id = uuid.NewString()
	}
	if _, dup := m[rec.id]; dup {
		return fmt.Errorf("id %s is already taken", rec.id)
	}
	w.seq++
	rec.seq, rec.created = w.seq, now
	m[rec.id] = obj
	return nil
}

// sorted returns the objects of m that keep accepts, oldest first.
func sorted[T object](m map[string]T, keep func(T) bool) []T {
	var out []T
	for _, obj := range m {
		if keep(obj) {
			out = append(out, obj)
		}
	}
	slices.SortFunc(out, func(a, b T) int { return cmp.Compare(a.base().seq, b.base().seq) })
	return out
}

// inProject is a sorted filter for the objects of one project.
func inProject[T object](projectID string) func(T) bool {
	return func(obj T) bool { return obj.base().projectID == projectID }
}

// project is an Equinix Metal project. Its API keys grant access to it alone.
type project struct {
	record
	name string
}

// metro is a metro of the simulator's fixed catalogue.
type metro struct {
	code, name, country string
}

var metros = []metro{
	{"am", "Amsterdam", "NL"},
	{"at", "Atlanta", "US"},
	{"ch", "Chicago", "US"},
	{"da", "Dallas", "US"},
	{"dc", "Washington DC", "US"},
	{"fr", "Frankfurt", "DE"},
	{"la", "Los Angeles", "US"},
	{"ld", "London", "GB"},
	{"ny", "New York", "US"},
	{"sg", "Singapore", "SG"},
	{"sv", "Silicon Valley", "US"},
	{"sy", "Sydney", "AU"},
	{"ty", "Tokyo", "JP"},
}

// metroID is the stable ID of a metro, derived from its code.
func metroID(code string) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("metal-sim/metros/"+code)).String()
}

// checkMetro accepts a metro code of the catalogue.
func checkMetro(code string) error {
	if !slices.ContainsFunc(metros, func(m metro) bool { return m.code == code }) {
		return fmt.Errorf("metro %q does not exist", code)
	}
	return nil
}

// matchesMetro reports whether a metro filter (a code or an ID, as the API
// accepts) selects the metro code.
func matchesMetro(filter, code string) bool {
	return filter == "" || strings.EqualFold(filter, code) || filter == metroID(code)
}

func apiMetro(code string) *metalv1.Metro {
	i := slices.IndexFunc(metros, func(m metro) bool { return m.code == code })
	m := metros[i]
	return &metalv1.Metro{Id: metalv1.PtrString(metroID(code)), Code: &m.code, Name: &m.name, Country: &m.country}
}

// href is the API path of an object, as the API writes it in "href" fields.
func href(parts ...string) string {
	return apiPrefix + "/" + strings.Join(parts, "/")
}

// ref is a bare reference to an object, what the API answers for a nested
// object that was not included.
func ref(parts ...string) *metalv1.Href {
	return &metalv1.Href{Href: href(parts...)}
}

func projectRef(id string) *metalv1.Project {
	return &metalv1.Project{Href: metalv1.PtrString(href("projects", id))}
}

// render maps stored objects to API models. The result is never nil: the SDK
// omits nil slices, and the API answers an empty list as [].
func render[T, U any](items []T, f func(T) U) []U {
	out := make([]U, len(items))
	for i, item := range items {
		out[i] = f(item)
	}
	return out
}

// nonNil makes an empty string list marshal as [] rather than be omitted.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
