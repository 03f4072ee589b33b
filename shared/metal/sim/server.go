package sim

import (
	"cmp"
	"context"
	"errors"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// apiPrefix is where the simulator serves the Metal API, as the real one does.
const apiPrefix = "/metal/v1"

// Options configure a Server. The zero value is a simulator that only knows
// what it is seeded with and where everything happens at once.
type Options struct {
	// APIKeys are user-level tokens, valid for every project. Projects also
	// get keys of their own from the seed.
	APIKeys []string
	// Clock drives devices and batches through their states; the real
	// clock when nil.
	Clock Clock
	// DeviceProvisionDelay is how long a new device takes to become active:
	// queued for DeviceQueueDelay, provisioning for the rest. Zero makes
	// devices active at once.
	DeviceProvisionDelay time.Duration
	// DeviceQueueDelay is how long of DeviceProvisionDelay a new device is
	// queued; zero means half of it. The platform queues a device for
	// seconds when it has the hardware, and provisions it for minutes: a
	// test of the provisioning polls at the platform's times sets it.
	DeviceQueueDelay time.Duration
	// DeviceDeprovisionDelay is how long a deleted device stays in state
	// deprovisioning before it is gone (404). Zero removes devices at once.
	DeviceDeprovisionDelay time.Duration
	// MaxDevicesInFlight caps the devices of a project that may be queued or
	// provisioning at once: a create beyond it is answered 429 with a
	// Retry-After, as the platform throttles bursts of provisioning. Zero
	// is no cap.
	MaxDevicesInFlight int
	// BatchDelay is how long a VLAN assignment batch takes: queued for the
	// first half, in_progress for the second, then completed or failed.
	// Zero completes batches at once.
	BatchDelay time.Duration
	// Latency is added to every API answer (see also SetLatency).
	Latency time.Duration
}

// Server is the simulated Metal API, an http.Handler. All its state sits
// behind one mutex, so it is safe for concurrent requests and test helpers.
type Server struct {
	clock       Clock
	deviceDelay time.Duration
	queueDelay  time.Duration
	batchDelay  time.Duration
	// deprovisionDelay and maxInFlight are the Options of the same names.
	deprovisionDelay time.Duration
	maxInFlight      int
	userKeys         map[string]bool
	mux              *http.ServeMux
	operations       map[Operation]bool // the operations served, set up by routes

	mu      sync.Mutex
	world   *world
	latency time.Duration
	faults  map[Operation][]*fault
	// batchFaults are the platform errors the next batches fail with.
	batchFaults []string
	calls       map[Operation]int
	answers     map[Operation]map[int]int // status -> count
	// nodes maps the source addresses of nodes to their devices, for the
	// metadata service.
	nodes map[netip.Addr]string
}

// New returns a Server with an empty world; Seed it before use.
func New(opts Options) *Server {
	s := &Server{
		clock:       opts.Clock,
		deviceDelay: opts.DeviceProvisionDelay,
		queueDelay:  cmp.Or(min(opts.DeviceQueueDelay, opts.DeviceProvisionDelay), opts.DeviceProvisionDelay/2),
		batchDelay:  opts.BatchDelay,
		userKeys:    map[string]bool{},
		mux:         http.NewServeMux(),
		operations:  map[Operation]bool{},
		world:       newWorld(),
		latency:     opts.Latency,
		faults:      map[Operation][]*fault{},
		calls:       map[Operation]int{},
		answers:     map[Operation]map[int]int{},
		nodes:       map[netip.Addr]string{},

		deprovisionDelay: opts.DeviceDeprovisionDelay,
		maxInFlight:      opts.MaxDevicesInFlight,
	}
	if s.clock == nil {
		s.clock = realClock{}
	}
	for _, k := range opts.APIKeys {
		s.userKeys[k] = true
	}
	s.routes()
	return s
}

// ServeHTTP serves the Metal API under /metal/v1 and the simulator's own
// controls under /_sim.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

func (s *Server) routes() {
	const v1 = apiPrefix
	s.handle("GET "+v1+"/projects/{id}/vrfs", OpFindVrfs, s.listVRFs)
	s.handle("GET "+v1+"/vrfs/{id}", OpFindVrfByID, s.getVRF)
	s.handle("GET "+v1+"/vrfs/{id}/ips", OpFindVrfIPReservations, s.listReservations)
	s.handle("GET "+v1+"/vrfs/{vrf}/ips/{id}", OpFindVrfIPReservation, s.getReservation)
	s.handle("POST "+v1+"/projects/{id}/ips", OpRequestIPReservation, s.createReservation)
	s.handle("GET "+v1+"/projects/{id}/ips", OpFindIPReservations, s.listIPReservations)
	s.handle("GET "+v1+"/ips/{id}", OpFindIPAddressByID, s.getIPAddress)
	s.handle("DELETE "+v1+"/ips/{id}", OpDeleteIPAddress, s.deleteReservation)

	s.handle("GET "+v1+"/projects/{id}/metal-gateways", OpFindMetalGatewaysByProject, s.listGateways)
	s.handle("GET "+v1+"/metal-gateways/{id}", OpFindMetalGatewayByID, s.getGateway)

	s.handle("GET "+v1+"/projects/{id}/virtual-networks", OpFindVirtualNetworks, s.listVirtualNetworks)
	s.handle("GET "+v1+"/virtual-networks/{id}", OpGetVirtualNetwork, s.getVirtualNetwork)

	s.handle("POST "+v1+"/projects/{id}/devices", OpCreateDevice, s.createDevice)
	s.handle("GET "+v1+"/projects/{id}/devices", OpFindProjectDevices, s.listDevices)
	s.handle("GET "+v1+"/devices/{id}", OpFindDeviceByID, s.getDevice)
	s.handle("DELETE "+v1+"/devices/{id}", OpDeleteDevice, s.deleteDevice)
	s.handle("GET "+v1+"/devices/{id}/events", OpFindDeviceEvents, s.listDeviceEvents)
	s.handle("POST "+v1+"/devices/{id}/actions", OpPerformAction, s.performAction)
	s.handle("POST "+v1+"/devices/{id}/ips", OpCreateIPAssignment, s.createIPAssignment)
	s.handle("GET "+v1+"/hardware-reservations/{id}", OpFindHardwareReservationByID, s.getHardwareReservation)

	s.handle("GET "+v1+"/ports/{id}", OpFindPortByID, s.getPort)
	s.handle("POST "+v1+"/ports/{id}/assign", OpAssignPort, s.portAction(assignVLAN))
	s.handle("POST "+v1+"/ports/{id}/unassign", OpUnassignPort, s.portAction(unassignVLAN))
	s.handle("POST "+v1+"/ports/{id}/convert/layer-2", OpConvertLayer2, s.portAction(convertLayer2))
	s.handle("POST "+v1+"/ports/{id}/convert/layer-3", OpConvertLayer3, s.portAction(convertLayer3))
	s.handle("POST "+v1+"/ports/{id}/bond", OpBondPort, s.portAction(bond))
	s.handle("POST "+v1+"/ports/{id}/disbond", OpDisbondPort, s.portAction(disbond))
	s.handle("POST "+v1+"/ports/{id}/native-vlan", OpAssignNativeVlan, s.portAction(assignNativeVLAN))
	s.handle("DELETE "+v1+"/ports/{id}/native-vlan", OpDeleteNativeVlan, s.portAction(removeNativeVLAN))

	s.handle("POST "+v1+"/ports/{id}/vlan-assignments/batches", OpCreatePortVlanAssignmentBatch, s.createBatch)
	s.handle("GET "+v1+"/ports/{id}/vlan-assignments/batches", OpFindPortVlanAssignmentBatches, s.listBatches)
	s.handle("GET "+v1+"/ports/{id}/vlan-assignments/batches/{batch}", OpFindPortVlanAssignmentBatch, s.getBatch)

	s.adminRoutes()
	s.nodeRoutes()

	s.mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { writeError(w, errNotFound) })
}

// request is an authenticated API request.
type request struct {
	*http.Request
	now time.Time
	// allProjects is set for user-level keys; otherwise the key belongs to
	// projectID alone.
	allProjects bool
	projectID   string
}

func (r *request) canSee(projectID string) bool {
	return r.allProjects || r.projectID == projectID
}

// handler serves one operation with the world locked.
type handler func(r *request) (reply, error)

// handle registers h for pattern. Every request is counted under op, delayed
// by the configured latency, authenticated, and failed instead if a fault is
// queued for op; due state transitions are applied before h runs.
func (s *Server) handle(pattern string, op Operation, h handler) {
	s.operations[op] = true
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, hr *http.Request) {
		if err := s.delay(hr.Context(), op); err != nil {
			return // the client went away
		}
		a, err := s.serve(hr, op, h)
		if err != nil {
			s.countAnswer(op, err.status)
			writeError(w, err)
			return
		}
		s.countAnswer(op, a.status)
		setRetryAfter(w, a.retryAfter)
		writeBody(w, a.status, a.body)
	})
}

// countAnswer counts an answer of op by its status, for Answers.
func (s *Server) countAnswer(op Operation, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.answers[op] == nil {
		s.answers[op] = map[int]int{}
	}
	s.answers[op][status]++
}

// setRetryAfter sends d as a Retry-After header, in whole seconds rounded up.
func setRetryAfter(w http.ResponseWriter, d time.Duration) {
	if d > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(d.Seconds()))))
	}
}

// delay counts the call and waits the configured latency, outside the lock
// so that slow answers do not serialise the simulator.
func (s *Server) delay(ctx context.Context, op Operation) error {
	s.mu.Lock()
	s.calls[op]++
	d := s.latency
	s.mu.Unlock()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// answer is a marshalled answer, ready to write.
type answer struct {
	status     int
	body       []byte
	retryAfter time.Duration
}

// serve runs h under the lock and marshals its answer there too, since the
// answer may share slices with the state.
func (s *Server) serve(hr *http.Request, op Operation, h handler) (answer, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.authenticate(hr)
	if err != nil {
		return answer{}, err
	}
	if f := s.takeFault(op); f != nil {
		return f.answer(), nil
	}
	s.advance(r.now)
	return toAnswer(h(r))
}

// toAnswer marshals the outcome of a handler.
func toAnswer(rep reply, err error) (answer, *apiError) {
	if err != nil {
		if apiErr, ok := errors.AsType[*apiError](err); ok {
			return answer{}, apiErr
		}
		return answer{}, errorf(http.StatusInternalServerError, "%v", err)
	}
	body, err := marshal(rep.body)
	if err != nil {
		return answer{}, errorf(http.StatusInternalServerError, "marshalling the answer: %v", err)
	}
	return answer{status: rep.status, body: body}, nil
}

// authenticate checks the X-Auth-Token header against the user-level keys and
// the projects' keys.
func (s *Server) authenticate(hr *http.Request) (*request, *apiError) {
	token := hr.Header.Get("X-Auth-Token")
	r := &request{Request: hr, now: s.clock.Now()}
	switch {
	case token == "":
		return nil, errorf(http.StatusUnauthorized, "missing X-Auth-Token header")
	case s.userKeys[token]:
		r.allProjects = true
	default:
		projectID, ok := s.world.keys[token]
		if !ok {
			return nil, errorf(http.StatusUnauthorized, "invalid authentication token")
		}
		r.projectID = projectID
	}
	return r, nil
}

// find returns the object of m whose ID is the request's path value
// pathValue, or a 404 if it does not exist or the caller may not see its project.
func find[T object](r *request, m map[string]T, pathValue string) (T, error) {
	obj, ok := m[r.PathValue(pathValue)]
	if !ok || !r.canSee(obj.base().projectID) {
		var zero T
		return zero, errNotFound
	}
	return obj, nil
}
