package sim

import (
	"maps"
	"net/http"
	"net/netip"
	"time"
)

// The simulator's controls over HTTP, for bin/metalsim users: the Go methods
// of the same names are what tests use. They take any valid API key and are
// not counted as API calls.
func (s *Server) adminRoutes() {
	s.admin("POST /_sim/faults", s.postFault)
	s.admin("DELETE /_sim/faults", func(*http.Request) (reply, error) {
		s.ClearFaults()
		return noContent()
	})
	s.admin("GET /_sim/calls", func(*http.Request) (reply, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return ok(maps.Clone(s.calls))
	})
	s.admin("POST /_sim/devices/{id}/user-state", s.postUserState)
	s.admin("POST /_sim/nodes", s.postNode)
}

func (s *Server) admin(pattern string, h func(*http.Request) (reply, error)) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, hr *http.Request) {
		s.mu.Lock()
		_, authErr := s.authenticate(hr)
		s.mu.Unlock()
		if authErr != nil {
			writeError(w, authErr)
			return
		}
		a, err := toAnswer(h(hr))
		if err != nil {
			writeError(w, err)
			return
		}
		writeBody(w, a.status, a.body)
	})
}

// faultRequest is the body of POST /_sim/faults.
type faultRequest struct {
	Operation         Operation `json:"operation"`
	Count             int       `json:"count"`
	Status            int       `json:"status"`
	RetryAfterSeconds int       `json:"retryAfterSeconds,omitempty"`
}

// POST /_sim/faults {"operation", "count", "status", "retryAfterSeconds"}
func (s *Server) postFault(r *http.Request) (reply, error) {
	var in faultRequest
	if err := decode(r, &in); err != nil {
		return reply{}, err
	}
	if err := s.checkFault(in.Operation, in.Count, in.Status); err != nil {
		return reply{}, unprocessable(err)
	}
	s.FailNext(in.Operation, in.Count, in.Status, time.Duration(in.RetryAfterSeconds)*time.Second)
	return noContent()
}

// userStateRequest is what a node posts to its user_state_url.
type userStateRequest struct {
	State   string `json:"state"`
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// POST /_sim/devices/{id}/user-state {"state", "code", "message"}
func (s *Server) postUserState(r *http.Request) (reply, error) {
	var in userStateRequest
	if err := decode(r, &in); err != nil {
		return reply{}, err
	}
	if err := s.PostUserState(r.PathValue("id"), in.State, in.Code, in.Message); err != nil {
		return reply{}, unprocessable(err)
	}
	return noContent()
}

// nodeRequest is the body of POST /_sim/nodes.
type nodeRequest struct {
	Address  string `json:"address"`
	DeviceID string `json:"deviceID"`
}

// POST /_sim/nodes {"address", "deviceID"}
func (s *Server) postNode(r *http.Request) (reply, error) {
	var in nodeRequest
	if err := decode(r, &in); err != nil {
		return reply{}, err
	}
	addr, err := netip.ParseAddr(in.Address)
	if err != nil {
		return reply{}, unprocessable(err)
	}
	if err := s.BindNode(addr, in.DeviceID); err != nil {
		return reply{}, unprocessable(err)
	}
	return noContent()
}
