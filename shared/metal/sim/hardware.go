package sim

import (
	"fmt"
	"regexp"
	"slices"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	"github.com/google/uuid"
)

// NextAvailable is the hardware_reservation_id that asks for any provisionable
// reservation of the project with the device's plan, in the device's metro.
const NextAvailable = "next-available"

// hardwareReservation is a server reserved for a project, of one plan in one
// facility. A device provisioned on it takes it until the device is gone.
type hardwareReservation struct {
	record
	plan     string
	facility string
	// deviceID is the device provisioned on the reservation, empty while it
	// is provisionable.
	deviceID string
}

func (h *hardwareReservation) metro() string { return facilityMetro(h.facility) }

// facilityCode is the form of the simulator's facility codes: a metro code and
// a number, as the platform's (da11, ny5).
var facilityCode = regexp.MustCompile(`^([a-z]{2})[0-9]+$`)

// checkFacility accepts a facility code of a metro of the catalogue.
func checkFacility(code string) error {
	m := facilityCode.FindStringSubmatch(code)
	if m == nil || checkMetro(m[1]) != nil {
		return fmt.Errorf("facility %q does not exist", code)
	}
	return nil
}

// facilityMetro is the metro code of a valid facility code.
func facilityMetro(code string) string { return code[:2] }

// metroFacility is the facility a device created in a metro is placed in.
// The platform places such a device in a facility of the metro that has
// capacity and reports that facility (its nodes get their zone from it);
// the simulator, whose capacity is unlimited, always picks the metro's
// first one, <metro>1 (also where a seeded reservation without a facility
// is).
func metroFacility(metro string) string { return metro + "1" }

func apiFacility(code string) *metalv1.Facility {
	return &metalv1.Facility{
		Id:    metalv1.PtrString(uuid.NewSHA1(uuid.NameSpaceURL, []byte("metal-sim/facilities/"+code)).String()),
		Code:  metalv1.PtrString(code),
		Name:  metalv1.PtrString(code),
		Metro: (*metalv1.DeviceMetro)(apiMetro(facilityMetro(code))),
	}
}

func (w *world) addHardwareReservation(h *hardwareReservation, now time.Time) error {
	if h.plan == "" {
		return fmt.Errorf("a hardware reservation needs a plan")
	}
	if err := checkFacility(h.facility); err != nil {
		return err
	}
	return store(w, w.hardware, h, now)
}

func (w *world) apiHardwareReservation(h *hardwareReservation) metalv1.HardwareReservation {
	out := metalv1.HardwareReservation{
		Id:            &h.id,
		ShortId:       metalv1.PtrString(h.id[:min(8, len(h.id))]),
		Href:          metalv1.PtrString(href("hardware-reservations", h.id)),
		Plan:          &metalv1.Plan{Slug: &h.plan, Name: &h.plan},
		Facility:      apiFacility(h.facility),
		Project:       projectRef(h.projectID),
		Provisionable: metalv1.PtrBool(h.deviceID == ""),
		Spare:         metalv1.PtrBool(false),
		NeedOfService: metalv1.PtrBool(false),
		CreatedAt:     &h.created,
	}
	if h.deviceID != "" {
		out.Device = &metalv1.Device{Id: metalv1.PtrString(h.deviceID), Href: metalv1.PtrString(href("devices", h.deviceID))}
	}
	return out
}

// GET /hardware-reservations/{id}
func (s *Server) getHardwareReservation(r *request) (reply, error) {
	h, err := find(r, s.world.hardware, "id")
	if err != nil {
		return reply{}, err
	}
	return ok(s.world.apiHardwareReservation(h))
}

// takeHardwareReservation finds the reservation a new device asks for and
// checks that it fits the device; the caller assigns it once the device is
// stored. An ID that does not name a reservation of the project is a 422, not
// a 404: it is a field of the request body, not the object the path
// addresses, and the API answers a bad field with 422.
func (w *world) takeHardwareReservation(d *device, id string, facilities []string) (*hardwareReservation, error) {
	fits := func(h *hardwareReservation) bool {
		if len(facilities) > 0 {
			return slices.Contains(facilities, h.facility)
		}
		return h.metro() == d.metro
	}
	if id == NextAvailable {
		for _, h := range sorted(w.hardware, inProject[*hardwareReservation](d.projectID)) {
			if h.deviceID == "" && h.plan == d.plan && fits(h) {
				return h, nil
			}
		}
		where := "metro " + d.metro
		if len(facilities) > 0 {
			where = fmt.Sprintf("facilities %v", facilities)
		}
		return nil, fmt.Errorf("no provisionable hardware reservation of plan %s in %s", d.plan, where)
	}
	h, ok := w.hardware[id]
	switch {
	case !ok || h.projectID != d.projectID:
		return nil, fmt.Errorf("hardware reservation %s does not exist in the project", id)
	case h.deviceID != "":
		return nil, fmt.Errorf("hardware reservation %s is already provisioned with device %s", id, h.deviceID)
	case h.plan != d.plan:
		return nil, fmt.Errorf("hardware reservation %s is of plan %s, not %s", id, h.plan, d.plan)
	case !fits(h):
		return nil, fmt.Errorf("hardware reservation %s is in facility %s, not where the device is asked for", id, h.facility)
	}
	return h, nil
}
