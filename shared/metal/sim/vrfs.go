package sim

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

// maxVRFsPerProject is the platform's limit.
const maxVRFsPerProject = 8

// vrf is a VRF: a routing domain with the IP ranges its reservations are cut
// from. The API offers no way to create one here; they come from the seed.
type vrf struct {
	record
	name        string
	description string
	metro       string
	localASN    int64
	ranges      []netip.Prefix
	tags        []string
}

// addVRF checks v against the platform's limits and stores it.
func (w *world) addVRF(v *vrf, now time.Time) error {
	if v.name == "" {
		return errors.New("a VRF needs a name")
	}
	if err := checkMetro(v.metro); err != nil {
		return err
	}
	if err := checkVRFRanges(v.ranges); err != nil {
		return err
	}
	if len(sorted(w.vrfs, inProject[*vrf](v.projectID))) >= maxVRFsPerProject {
		return fmt.Errorf("the project already has the maximum of %d VRFs", maxVRFsPerProject)
	}
	return store(w, w.vrfs, v, now)
}

// checkVRFRanges applies the platform's limits on VRF ranges: IPv4 /8 to
// /29, at most one IPv6 range of /59 to /64, no overlaps.
func checkVRFRanges(ranges []netip.Prefix) error {
	if len(ranges) == 0 {
		return errors.New("a VRF needs at least one IP range")
	}
	ipv6 := 0
	for i, p := range ranges {
		if p != p.Masked() {
			return fmt.Errorf("IP range %s is not a network address (%s)", p, p.Masked())
		}
		if p.Addr().Is4() {
			if p.Bits() < 8 || p.Bits() > 29 {
				return fmt.Errorf("IPv4 range %s must be between /8 and /29", p)
			}
		} else {
			ipv6++
			if p.Bits() < 59 || p.Bits() > 64 {
				return fmt.Errorf("IPv6 range %s must be between /59 and /64", p)
			}
		}
		for _, q := range ranges[:i] {
			if p.Overlaps(q) {
				return fmt.Errorf("IP ranges %s and %s overlap", q, p)
			}
		}
	}
	if ipv6 > 1 {
		return errors.New("a VRF has at most one IPv6 range")
	}
	return nil
}

func apiVRF(v *vrf) metalv1.Vrf {
	ranges := make([]string, len(v.ranges))
	for i, p := range v.ranges {
		ranges[i] = p.String()
	}
	return metalv1.Vrf{
		Id:                         &v.id,
		Href:                       metalv1.PtrString(href("vrfs", v.id)),
		Name:                       &v.name,
		Description:                &v.description,
		LocalAsn:                   &v.localASN,
		IpRanges:                   ranges,
		Metro:                      apiMetro(v.metro),
		Project:                    projectRef(v.projectID),
		Tags:                       nonNil(v.tags),
		Bill:                       metalv1.PtrBool(false),
		BgpDynamicNeighborsEnabled: metalv1.PtrBool(false),
		CreatedAt:                  &v.created,
		UpdatedAt:                  &v.created,
	}
}

// GET /projects/{id}/vrfs[?metro=]
func (s *Server) listVRFs(r *request) (reply, error) {
	p, err := find(r, s.world.projects, "id")
	if err != nil {
		return reply{}, err
	}
	metro := r.URL.Query().Get("metro")
	vrfs := sorted(s.world.vrfs, func(v *vrf) bool { return v.projectID == p.id && matchesMetro(metro, v.metro) })
	return ok(metalv1.VrfList{Vrfs: render(vrfs, apiVRF)})
}

// GET /vrfs/{id}
func (s *Server) getVRF(r *request) (reply, error) {
	v, err := find(r, s.world.vrfs, "id")
	if err != nil {
		return reply{}, err
	}
	return ok(apiVRF(v))
}
