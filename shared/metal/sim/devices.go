package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	"github.com/google/uuid"
)

// FailProvisioningPlan is a device plan whose devices fail to provision: they
// go from queued through provisioning to failed instead of active.
const FailProvisioningPlan = "sim.fail-provisioning"

// Event types of the device timeline. The provisioning ones follow the
// platform's numbering; user-state events are the simulator's rendering of
// what a node posts to its user_state_url.
const (
	EventCreated            = "instance.created"
	EventProvisionStarted   = "provisioning.101"
	EventProvisionComplete  = "provisioning.109"
	EventProvisionFailed    = "provisioning.failed"
	EventDeprovisionStarted = "instance.deprovisioning"
	EventPoweredOff         = "instance.powered_off"
	EventPoweredOn          = "instance.powered_on"
	EventUserState          = "user_state"
)

// User states a node may report, the platform's set.
var userStates = []string{"running", "succeeded", "failed"}

// device is a server with the three ports of the platform's standard
// layout: bond0 over eth0 and eth1.
type device struct {
	record
	hostname        string
	plan            string
	operatingSystem string
	metro           string
	billingCycle    string
	userdata        string
	tags            []string
	customdata      map[string]any
	networkFrozen   bool
	// facility is where the device runs: the first one asked for, the
	// reservation's, or, for a device created in a metro, the metro's
	// default facility (see metroFacility).
	facility      string
	ipxeScriptURL string
	alwaysPXE     bool
	// sshKeys are the public keys given at creation.
	sshKeys []string
	// hardwareReservationID is the reservation the device runs on, if any.
	hardwareReservationID string
	state                 metalv1.DeviceState
	updated               time.Time
	// progress is a provisioning device's provisioning_percentage, as of
	// the last advance.
	progress float32
	// gone is when a deprovisioning device disappears.
	gone time.Time
	// layer3 is set while bond0 carries the device's IP addresses.
	layer3 bool
	// ports are the IDs of bond0, eth0 and eth1.
	ports  []string
	events []event // oldest first
}

type event struct {
	id, typ, body, state string
	at                   time.Time
}

func (d *device) log(typ, body, state string, at time.Time) {
	d.events = append(d.events, event{id: uuid.NewString(), typ: typ, body: body, state: state, at: at})
}

func (d *device) setState(state metalv1.DeviceState, at time.Time, typ, body string) {
	d.state, d.updated = state, at
	d.log(typ, body, "", at)
}

// addDevice checks d and stores it with its ports, bonded and Layer 3 as the
// platform provisions them.
func (w *world) addDevice(d *device, now time.Time) error {
	if err := checkMetro(d.metro); err != nil {
		return err
	}
	if d.plan == "" || d.operatingSystem == "" {
		return errors.New("a device needs a plan and an operating system")
	}
	if !d.state.IsValid() {
		return fmt.Errorf("%q is not a device state", d.state)
	}
	if err := store(w, w.devices, d, now); err != nil {
		return err
	}
	if d.hostname == "" {
		d.hostname = "sim-" + d.id[:8]
	}
	d.layer3, d.updated = true, now
	for i, name := range []string{"bond0", "eth0", "eth1"} {
		p := &port{
			record:   record{projectID: d.projectID},
			deviceID: d.id,
			name:     name,
			mac:      fmt.Sprintf("b8:ce:f6:%02x:%02x:%02x", byte(d.seq>>8), byte(d.seq), i),
			bonded:   name != "bond0",
		}
		if err := store(w, w.ports, p, now); err != nil {
			return err
		}
		d.ports = append(d.ports, p.id)
	}
	d.log(EventCreated, "Device "+d.hostname+" created", "", now)
	return nil
}

// removeDevice deletes a device with its ports and their batches, and frees
// its hardware reservation.
func (w *world) removeDevice(d *device) {
	if h, ok := w.hardware[d.hardwareReservationID]; ok && h.deviceID == d.id {
		h.deviceID = ""
	}
	for _, id := range d.ports {
		delete(w.ports, id)
	}
	for id, b := range w.batches {
		if slices.Contains(d.ports, b.portID) {
			delete(w.batches, id)
		}
	}
	for _, res := range w.publicIPs {
		if res.assignment != nil && res.assignment.deviceID == d.id {
			res.assignment = nil
		}
	}
	delete(w.devices, d.id)
}

// advance moves d along queued -> provisioning -> active (or failed):
// queued for queue, provisioning until delay. Transitions are dated when
// they were due, not when they are noticed. A provisioning device's
// progress grows with its time in provisioning, as the platform's
// provisioning_percentage does.
func (d *device) advance(now time.Time, queue, delay time.Duration) {
	if d.state == metalv1.DEVICESTATE_QUEUED {
		at := d.created.Add(queue)
		if now.Before(at) {
			return
		}
		d.setState(metalv1.DEVICESTATE_PROVISIONING, at, EventProvisionStarted, "Provision started")
	}
	if d.state == metalv1.DEVICESTATE_PROVISIONING {
		at := d.created.Add(delay)
		if now.Before(at) {
			d.progress = float32(100 * float64(now.Sub(d.created.Add(queue))) / float64(delay-queue))
			return
		}
		if d.plan == FailProvisioningPlan {
			d.setState(metalv1.DEVICESTATE_FAILED, at, EventProvisionFailed, "Provisioning failed")
		} else {
			d.setState(metalv1.DEVICESTATE_ACTIVE, at, EventProvisionComplete, "Provision complete")
		}
	}
}

// advance applies every device and batch transition due by now, oldest
// object first so that batches apply in the order they were made.
func (s *Server) advance(now time.Time) {
	for _, d := range sorted(s.world.devices, func(*device) bool { return true }) {
		if d.state == metalv1.DEVICESTATE_DEPROVISIONING {
			if !now.Before(d.gone) {
				s.world.removeDevice(d)
			}
			continue
		}
		d.advance(now, s.queueDelay, s.deviceDelay)
	}
	for _, b := range sorted(s.world.batches, func(*batch) bool { return true }) {
		s.world.advanceBatch(b, now, s.batchDelay)
	}
}

// PostUserState records a state reported by the node running on a device,
// as the node does by POSTing {state, code, message} to the user_state_url of
// the metadata service: an event of type EventUserState with the given state
// and the message as its body. state is running, succeeded or failed; code is
// between 1000 and 1099.
func (s *Server) PostUserState(deviceID, state string, code int, message string) error {
	if !slices.Contains(userStates, state) {
		return fmt.Errorf("user state %q is not one of %v", state, userStates)
	}
	if code < 1000 || code > 1099 {
		return fmt.Errorf("user state code %d is not between 1000 and 1099", code)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.advance(now)
	d, ok := s.world.devices[deviceID]
	if !ok {
		return fmt.Errorf("device %s not found", deviceID)
	}
	if d.state != metalv1.DEVICESTATE_PROVISIONING && d.state != metalv1.DEVICESTATE_ACTIVE {
		return fmt.Errorf("device %s is %s: no operating system runs to report a state", deviceID, d.state)
	}
	d.log(EventUserState, message, state, now)
	return nil
}

func apiEvent(d *device, e event) metalv1.Event {
	out := metalv1.Event{
		Id:            &e.id,
		Href:          metalv1.PtrString(href("events", e.id)),
		Type:          &e.typ,
		Body:          &e.body,
		Interpolated:  &e.body,
		CreatedAt:     &e.at,
		Relationships: []metalv1.Href{*ref("devices", d.id)},
	}
	if e.state != "" {
		out.State = &e.state
	}
	return out
}

func (w *world) apiDevice(d *device) metalv1.Device {
	var provisioning []metalv1.Event
	for _, e := range d.events {
		if e.typ != EventUserState {
			provisioning = append(provisioning, apiEvent(d, e))
		}
	}
	out := metalv1.Device{
		Id:                 &d.id,
		ShortId:            metalv1.PtrString(d.id[:8]),
		Href:               metalv1.PtrString(href("devices", d.id)),
		Hostname:           &d.hostname,
		State:              &d.state,
		Plan:               &metalv1.Plan{Slug: &d.plan, Name: &d.plan},
		OperatingSystem:    &metalv1.OperatingSystem{Slug: &d.operatingSystem, Name: &d.operatingSystem},
		Metro:              (*metalv1.DeviceMetro)(apiMetro(d.metro)), // the same schema under another name
		BillingCycle:       &d.billingCycle,
		Userdata:           &d.userdata,
		Tags:               nonNil(d.tags),
		Customdata:         d.customdata,
		NetworkFrozen:      &d.networkFrozen,
		Locked:             metalv1.PtrBool(false),
		AlwaysPxe:          &d.alwaysPXE,
		SshKeys:            render(d.sshKeys, sshKeyRef),
		SpotInstance:       metalv1.PtrBool(false),
		Project:            projectRef(d.projectID),
		ProjectLite:        &metalv1.DeviceProjectLite{Href: href("projects", d.projectID)},
		NetworkPorts:       render(d.ports, func(id string) metalv1.Port { return w.apiPort(w.ports[id], includes{}) }),
		IpAddresses:        append(d.apiAddresses(), w.assignedTo(d.id)...),
		ProvisioningEvents: provisioning,
		CreatedAt:          &d.created,
		UpdatedAt:          &d.updated,
	}
	if d.state == metalv1.DEVICESTATE_PROVISIONING {
		out.ProvisioningPercentage = metalv1.PtrFloat32(d.progress)
	}
	if d.ipxeScriptURL != "" {
		out.IpxeScriptUrl = &d.ipxeScriptURL
	}
	if d.facility != "" {
		out.Facility = apiFacility(d.facility)
	}
	if d.hardwareReservationID != "" {
		out.HardwareReservation = &metalv1.HardwareReservation{
			Id:   &d.hardwareReservationID,
			Href: metalv1.PtrString(href("hardware-reservations", d.hardwareReservationID)),
		}
	}
	return out
}

// sshKeyRef is the reference a device answers for one of its SSH keys. The
// simulator keeps no key objects: the ID is derived from the key itself.
func sshKeyRef(key string) metalv1.Href {
	return *ref("ssh-keys", uuid.NewSHA1(uuid.NameSpaceURL, []byte("metal-sim/ssh-keys/"+key)).String())
}

// deviceInput is what the metro and facility create inputs have in common.
type deviceInput interface {
	GetHostname() string
	GetPlan() string
	GetOperatingSystem() string
	GetBillingCycle() metalv1.DeviceCreateInputBillingCycle
	GetUserdata() string
	GetTags() []string
	GetCustomdata() map[string]any
	GetNetworkFrozen() bool
	GetIpxeScriptUrl() string
	GetAlwaysPxe() bool
	GetSshKeys() []metalv1.SSHKeyInput
	GetHardwareReservationId() string
}

// decodeDeviceInput reads a create request: in a facility (a list of facility
// codes) when it has "facility", in a metro otherwise. It returns the input,
// the metro and the facilities asked for.
func decodeDeviceInput(r *request) (deviceInput, string, []string, error) {
	var raw json.RawMessage
	if err := decode(r.Request, &raw); err != nil {
		return nil, "", nil, err
	}
	var probe struct {
		Facility json.RawMessage `json:"facility"`
	}
	_ = json.Unmarshal(raw, &probe) // raw is valid JSON; a non-object fails below
	if probe.Facility == nil {
		var in metalv1.DeviceCreateInMetroInput
		if err := json.Unmarshal(raw, &in); err != nil {
			return nil, "", nil, errorf(http.StatusUnprocessableEntity, "invalid request: %v", err)
		}
		return &in, in.Metro, nil, nil
	}
	var in metalv1.DeviceCreateInFacilityInput
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, "", nil, errorf(http.StatusUnprocessableEntity, "invalid request: %v", err)
	}
	if len(in.Facility) == 0 {
		return nil, "", nil, errorf(http.StatusUnprocessableEntity, "facility must list at least one facility")
	}
	for _, f := range in.Facility {
		if err := checkFacility(f); err != nil {
			return nil, "", nil, unprocessable(err)
		}
	}
	return &in, facilityMetro(in.Facility[0]), in.Facility, nil
}

// POST /projects/{id}/devices, in a metro or in facilities (placed in the
// first one listed), optionally on a hardware reservation.
func (s *Server) createDevice(r *request) (reply, error) {
	p, err := find(r, s.world.projects, "id")
	if err != nil {
		return reply{}, err
	}
	if s.maxInFlight > 0 && s.inFlight(p.id) >= s.maxInFlight {
		e := errorf(http.StatusTooManyRequests, "project %s already has %d devices provisioning; try again later", p.id, s.maxInFlight)
		e.retryAfter = deviceRetryAfter
		return reply{}, e
	}
	in, metro, facilities, err := decodeDeviceInput(r)
	if err != nil {
		return reply{}, err
	}
	d := &device{
		record:          record{projectID: p.id},
		hostname:        in.GetHostname(),
		plan:            in.GetPlan(),
		operatingSystem: in.GetOperatingSystem(),
		metro:           metro,
		billingCycle:    string(metalv1.DEVICECREATEINPUTBILLINGCYCLE_HOURLY),
		userdata:        in.GetUserdata(),
		tags:            in.GetTags(),
		customdata:      in.GetCustomdata(),
		networkFrozen:   in.GetNetworkFrozen(),
		ipxeScriptURL:   in.GetIpxeScriptUrl(),
		alwaysPXE:       in.GetAlwaysPxe(),
		state:           metalv1.DEVICESTATE_QUEUED,
	}
	if b := in.GetBillingCycle(); b != "" {
		d.billingCycle = string(b)
	}
	d.facility = metroFacility(metro)
	if len(facilities) > 0 {
		d.facility = facilities[0]
	}
	for _, k := range in.GetSshKeys() {
		if k.GetKey() == "" {
			return reply{}, errorf(http.StatusUnprocessableEntity, "an SSH key has no key")
		}
		d.sshKeys = append(d.sshKeys, k.GetKey())
	}
	var hw *hardwareReservation
	if id := in.GetHardwareReservationId(); id != "" {
		if hw, err = s.world.takeHardwareReservation(d, id, facilities); err != nil {
			return reply{}, unprocessable(err)
		}
		d.facility, d.hardwareReservationID = hw.facility, hw.id
	}
	if err := s.world.addDevice(d, r.now); err != nil {
		return reply{}, unprocessable(err)
	}
	if hw != nil {
		hw.deviceID = d.id
	}
	d.advance(r.now, s.queueDelay, s.deviceDelay)
	return created(s.world.apiDevice(d))
}

// deviceRetryAfter is the Retry-After of a device create refused because
// too many devices of the project are being provisioned.
const deviceRetryAfter = 3 * time.Second

// inFlight counts the project's devices that are queued or provisioning.
func (s *Server) inFlight(projectID string) int {
	n := 0
	for _, d := range s.world.devices {
		if d.projectID == projectID && (d.state == metalv1.DEVICESTATE_QUEUED || d.state == metalv1.DEVICESTATE_PROVISIONING) {
			n++
		}
	}
	return n
}

// GET /projects/{id}/devices[?tag=&hostname=&page=&per_page=]. The
// hostname filter matches part of a hostname, as the API documents ("Filter
// by partial hostname"): node-a finds node-ab too.
func (s *Server) listDevices(r *request) (reply, error) {
	p, err := find(r, s.world.projects, "id")
	if err != nil {
		return reply{}, err
	}
	q := r.URL.Query()
	tag, hostname := q.Get("tag"), q.Get("hostname")
	devices := sorted(s.world.devices, func(d *device) bool {
		return d.projectID == p.id &&
			(tag == "" || slices.Contains(d.tags, tag)) &&
			(hostname == "" || strings.Contains(d.hostname, hostname))
	})
	page, meta, err := paginate(r.Request, devices)
	if err != nil {
		return reply{}, err
	}
	return ok(metalv1.DeviceList{Devices: render(page, s.world.apiDevice), Meta: meta})
}

// GET /devices/{id}
func (s *Server) getDevice(r *request) (reply, error) {
	d, err := find(r, s.world.devices, "id")
	if err != nil {
		return reply{}, err
	}
	return ok(s.world.apiDevice(d))
}

// DELETE /devices/{id}. With a deprovision delay the device is
// deprovisioning until it is gone; deleting it again meanwhile is accepted
// and changes nothing.
func (s *Server) deleteDevice(r *request) (reply, error) {
	d, err := find(r, s.world.devices, "id")
	if err != nil {
		return reply{}, err
	}
	switch {
	case d.state == metalv1.DEVICESTATE_DEPROVISIONING:
	case s.deprovisionDelay <= 0:
		s.world.removeDevice(d)
	default:
		d.gone = r.now.Add(s.deprovisionDelay)
		d.setState(metalv1.DEVICESTATE_DEPROVISIONING, r.now, EventDeprovisionStarted, "Deprovision started")
	}
	return noContent()
}

// POST /devices/{id}/actions: power_off (an active device becomes
// inactive) and power_on (back to active), at once; the platform's other
// actions are refused as the simulator does not model them.
func (s *Server) performAction(r *request) (reply, error) {
	d, err := find(r, s.world.devices, "id")
	if err != nil {
		return reply{}, err
	}
	var in metalv1.DeviceActionInput
	if err := decode(r.Request, &in); err != nil {
		return reply{}, err
	}
	switch {
	case in.Type == metalv1.DEVICEACTIONINPUTTYPE_POWER_OFF && d.state == metalv1.DEVICESTATE_ACTIVE:
		d.setState(metalv1.DEVICESTATE_INACTIVE, r.now, EventPoweredOff, "Powered off")
	case in.Type == metalv1.DEVICEACTIONINPUTTYPE_POWER_ON && d.state == metalv1.DEVICESTATE_INACTIVE:
		d.setState(metalv1.DEVICESTATE_ACTIVE, r.now, EventPoweredOn, "Powered on")
	case in.Type == metalv1.DEVICEACTIONINPUTTYPE_POWER_OFF, in.Type == metalv1.DEVICEACTIONINPUTTYPE_POWER_ON:
		return reply{}, errorf(http.StatusUnprocessableEntity, "device %s is %s: %s is not possible", d.id, d.state, in.Type)
	default:
		return reply{}, errorf(http.StatusUnprocessableEntity, "action %q is not supported by the simulator", in.Type)
	}
	return reply{status: http.StatusAccepted}, nil
}

// GET /devices/{id}/events[?page=&per_page=], newest first like the API.
func (s *Server) listDeviceEvents(r *request) (reply, error) {
	d, err := find(r, s.world.devices, "id")
	if err != nil {
		return reply{}, err
	}
	events := slices.Clone(d.events)
	slices.Reverse(events)
	page, meta, err := paginate(r.Request, events)
	if err != nil {
		return reply{}, err
	}
	return ok(metalv1.EventList{
		Events: render(page, func(e event) metalv1.Event { return apiEvent(d, e) }),
		Meta:   meta,
	})
}
