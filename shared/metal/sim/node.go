package sim

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
)

// What a booted node sees of the platform: the metadata service, which
// answers a node its own metadata and takes the user states it reports. Like
// the platform's metadata host it is served outside /metal/v1 and without a
// token: the caller is the device bound to the request's source address
// (BindNode).
func (s *Server) nodeRoutes() {
	s.node("GET /metadata", OpGetMetadata, s.metadata)
	s.node("POST /events", OpPostUserStateEvent, s.postEvent)
}

// BindNode makes requests to the metadata service from addr come from the
// device deviceID, as the platform knows its servers by their addresses. A
// later binding of addr replaces the earlier one.
func (s *Server) BindNode(addr netip.Addr, deviceID string) error {
	if !addr.IsValid() {
		return errors.New("a node address is required")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.world.devices[deviceID]; !ok {
		return fmt.Errorf("device %s not found", deviceID)
	}
	s.nodes[addr.Unmap()] = deviceID
	return nil
}

// node registers a metadata service handler, counted like the API's and
// given the device of the caller. h runs without the lock.
func (s *Server) node(pattern string, op Operation, h func(r *http.Request, deviceID string) (reply, error)) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.calls[op]++
		deviceID, err := s.caller(r)
		s.mu.Unlock()
		var a answer
		if err == nil {
			a, err = toAnswer(h(r, deviceID))
		}
		if err != nil {
			s.countAnswer(op, err.status)
			writeError(w, err)
			return
		}
		s.countAnswer(op, a.status)
		writeBody(w, a.status, a.body)
	})
}

// caller is the device bound to the source address of r. The caller holds
// the lock.
func (s *Server) caller(r *http.Request) (string, *apiError) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return "", errorf(http.StatusBadRequest, "cannot read the source address %q", r.RemoteAddr)
	}
	addr := ap.Addr().Unmap()
	deviceID, ok := s.nodes[addr]
	if !ok {
		return "", errorf(http.StatusNotFound, "no device is bound to source address %s (bind one with BindNode or POST /_sim/nodes)", addr)
	}
	if _, ok := s.world.devices[deviceID]; !ok {
		return "", errorf(http.StatusNotFound, "device %s, bound to source address %s, no longer exists", deviceID, addr)
	}
	return deviceID, nil
}

// nodeMetadata is the part of the platform's metadata the simulator answers.
type nodeMetadata struct {
	ID           string      `json:"id"`
	Hostname     string      `json:"hostname"`
	Plan         string      `json:"plan"`
	Metro        string      `json:"metro"`
	Facility     string      `json:"facility,omitempty"`
	Tags         []string    `json:"tags"`
	SSHKeys      []string    `json:"ssh_keys"`
	Network      nodeNetwork `json:"network"`
	UserStateURL string      `json:"user_state_url"`
}

type nodeNetwork struct {
	Bonding    nodeBonding     `json:"bonding"`
	Interfaces []nodeInterface `json:"interfaces"`
}

type nodeBonding struct {
	// Mode is the Linux bonding mode: 4 (802.3ad) on the platform.
	Mode int `json:"mode"`
}

// nodeInterface is a port of the device. The NICs carry the MACs the API
// gives their ports and name their bond; bond0 carries no MAC, because a
// bond takes a NIC's address at runtime and a MAC lookup would find that
// NIC instead (the rendered network script resolves an unlisted MAC by the
// port's name).
type nodeInterface struct {
	Name string `json:"name"`
	MAC  string `json:"mac,omitempty"`
	Bond string `json:"bond,omitempty"`
}

// GET /metadata
func (s *Server) metadata(r *http.Request, deviceID string) (reply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, found := s.world.devices[deviceID]
	if !found {
		return reply{}, errNotFound
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	md := nodeMetadata{
		ID:           d.id,
		Hostname:     d.hostname,
		Plan:         d.plan,
		Metro:        d.metro,
		Facility:     d.facility,
		Tags:         nonNil(d.tags),
		SSHKeys:      nonNil(d.sshKeys),
		Network:      nodeNetwork{Bonding: nodeBonding{Mode: 4}},
		UserStateURL: scheme + "://" + r.Host + "/events",
	}
	for _, id := range d.ports {
		p := s.world.ports[id]
		iface := nodeInterface{Name: p.name}
		if p.name != "bond0" {
			iface.MAC, iface.Bond = p.mac, "bond0"
		}
		md.Network.Interfaces = append(md.Network.Interfaces, iface)
	}
	return ok(md)
}

// POST /events {"state", "code", "message"}: the user_state_url.
func (s *Server) postEvent(r *http.Request, deviceID string) (reply, error) {
	var in userStateRequest
	if err := decode(r, &in); err != nil {
		return reply{}, err
	}
	if err := s.PostUserState(deviceID, in.State, in.Code, in.Message); err != nil {
		return reply{}, unprocessable(err)
	}
	return noContent()
}
