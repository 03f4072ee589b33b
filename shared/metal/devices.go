package metal

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

var (
	opCreateDevice       = operation{name: "createDevice"}
	opFindDeviceByID     = operation{name: "findDeviceById"}
	opFindProjectDevices = operation{name: "findProjectDevices"}
	opDeleteDevice       = operation{name: "deleteDevice"}
	opFindDeviceEvents   = operation{name: "findDeviceEvents"}

	opFindHardwareReservationByID = operation{name: "findHardwareReservationById"}
)

// DeviceRequest describes a device to provision.
type DeviceRequest struct {
	// Tag identifies the device across attempts: a caller that may have
	// asked for the device before finds it with ListDevices filtered by
	// the tag instead of creating another. It must be unique to the
	// requester (e.g. derived from a Machine's UID) and is added to Tags.
	Tag      string
	Hostname string
	Plan     string
	Metro    string
	// Facility, when set, places the device in this facility (e.g. da11)
	// instead of anywhere in Metro, which is then ignored.
	Facility string
	// HardwareReservationID provisions the device on a reserved server:
	// a reservation ID, or "next-available" for any provisionable
	// reservation of the plan in the metro.
	HardwareReservationID string
	// IPXEScriptURL boots the device from this iPXE script (operating
	// system custom_ipxe), on its first boot only.
	IPXEScriptURL string
	// SSHKeys are public keys installed on the device, on top of the
	// project's and users' keys.
	SSHKeys         []string
	OperatingSystem string
	// BillingCycle is hourly when empty.
	BillingCycle string
	Userdata     string
	Tags         []string
	Customdata   map[string]any
}

// DeviceFilter narrows ListDevices; empty fields match every device.
type DeviceFilter struct {
	Tag string
	// Hostname matches part of a hostname (the API's filter): callers
	// compare the hostnames of what they get.
	Hostname string
}

// CreateDevice creates a device without looking for one carrying req.Tag
// first: for a caller that knows it never asked for one (any other looks
// for its device by the tag first). It is not retried after a server error,
// whose outcome is unknown. req.Tag is added to the tags.
func (c *Client) CreateDevice(ctx context.Context, req DeviceRequest) (*metalv1.Device, error) {
	if err := c.requireProject(); err != nil {
		return nil, err
	}
	if req.Tag == "" {
		return nil, errors.New("metal: a device request needs an identifying tag")
	}
	in, err := req.createInput()
	if err != nil {
		return nil, err
	}
	return call(ctx, c, opCreateDevice, func(ctx context.Context) (*metalv1.Device, *http.Response, error) {
		return c.api.DevicesApi.CreateDevice(ctx, c.projectID).CreateDeviceRequest(in).Execute()
	})
}

func (req DeviceRequest) createInput() (metalv1.CreateDeviceRequest, error) {
	billing := metalv1.DEVICECREATEINPUTBILLINGCYCLE_HOURLY
	if req.BillingCycle != "" {
		b, err := metalv1.NewDeviceCreateInputBillingCycleFromValue(req.BillingCycle)
		if err != nil {
			return metalv1.CreateDeviceRequest{}, fmt.Errorf("metal: %w", err)
		}
		billing = *b
	}
	tags := slices.Clone(req.Tags)
	if !slices.Contains(tags, req.Tag) {
		tags = append(tags, req.Tag)
	}
	// The metro and facility inputs are the same but for the placement, so
	// the metro one is built and copied when a facility is asked for.
	in := &metalv1.DeviceCreateInMetroInput{
		Metro:           req.Metro,
		Plan:            req.Plan,
		OperatingSystem: req.OperatingSystem,
		BillingCycle:    &billing,
		Tags:            tags,
		Customdata:      req.Customdata,
	}
	if req.Hostname != "" {
		in.Hostname = &req.Hostname
	}
	if req.Userdata != "" {
		in.Userdata = &req.Userdata
	}
	if req.HardwareReservationID != "" {
		in.HardwareReservationId = &req.HardwareReservationID
	}
	if req.IPXEScriptURL != "" {
		// always_pxe false: the script installs the OS on the first boot,
		// later boots are from disk.
		in.IpxeScriptUrl, in.AlwaysPxe = &req.IPXEScriptURL, metalv1.PtrBool(false)
	}
	for _, key := range req.SSHKeys {
		in.SshKeys = append(in.SshKeys, metalv1.SSHKeyInput{Key: metalv1.PtrString(key)})
	}
	if req.Facility == "" {
		return metalv1.CreateDeviceRequest{DeviceCreateInMetroInput: in}, nil
	}
	return metalv1.CreateDeviceRequest{DeviceCreateInFacilityInput: &metalv1.DeviceCreateInFacilityInput{
		Facility:              []string{req.Facility},
		Plan:                  in.Plan,
		OperatingSystem:       in.OperatingSystem,
		BillingCycle:          in.BillingCycle,
		Tags:                  in.Tags,
		Customdata:            in.Customdata,
		Hostname:              in.Hostname,
		Userdata:              in.Userdata,
		HardwareReservationId: in.HardwareReservationId,
		IpxeScriptUrl:         in.IpxeScriptUrl,
		AlwaysPxe:             in.AlwaysPxe,
		SshKeys:               in.SshKeys,
	}}, nil
}

// GetDevice returns the device with the given ID, with its network ports and
// IP addresses.
func (c *Client) GetDevice(ctx context.Context, id string) (*metalv1.Device, error) {
	return call(ctx, c, opFindDeviceByID, func(ctx context.Context) (*metalv1.Device, *http.Response, error) {
		return c.api.DevicesApi.FindDeviceById(ctx, id).Execute()
	})
}

// ListDevices returns the project's devices matching filter, all pages.
func (c *Client) ListDevices(ctx context.Context, filter DeviceFilter) ([]metalv1.Device, error) {
	if err := c.requireProject(); err != nil {
		return nil, err
	}
	return listAll(ctx, c, opFindProjectDevices,
		func(ctx context.Context, page, perPage int32) (*metalv1.DeviceList, *http.Response, error) {
			req := c.api.DevicesApi.FindProjectDevices(ctx, c.projectID).Page(page).PerPage(perPage)
			if filter.Tag != "" {
				req = req.Tag(filter.Tag)
			}
			if filter.Hostname != "" {
				req = req.Hostname(filter.Hostname)
			}
			return req.Execute()
		},
		(*metalv1.DeviceList).GetDevices)
}

// DeleteDevice deletes a device. A device that is already gone is not an
// error, so a retried or repeated delete succeeds.
func (c *Client) DeleteDevice(ctx context.Context, id string) error {
	err := callNoContent(ctx, c, opDeleteDevice, func(ctx context.Context) (*http.Response, error) {
		return c.api.DevicesApi.DeleteDevice(ctx, id).Execute()
	})
	if IsNotFound(err) {
		return nil
	}
	return err
}

// DeviceEvents returns the events of a device, all pages, as the API orders
// them (newest first). They include the user-state events the device's
// operating system posts to the metadata service's user_state_url.
func (c *Client) DeviceEvents(ctx context.Context, id string) ([]metalv1.Event, error) {
	return listAll(ctx, c, opFindDeviceEvents,
		func(ctx context.Context, page, perPage int32) (*metalv1.EventList, *http.Response, error) {
			return c.api.EventsApi.FindDeviceEvents(ctx, id).Page(page).PerPage(perPage).Execute()
		},
		(*metalv1.EventList).GetEvents)
}

// GetHardwareReservation returns a hardware reservation; Provisionable says
// whether a device may be provisioned on it now.
func (c *Client) GetHardwareReservation(ctx context.Context, id string) (*metalv1.HardwareReservation, error) {
	return call(ctx, c, opFindHardwareReservationByID, func(ctx context.Context) (*metalv1.HardwareReservation, *http.Response, error) {
		return c.api.HardwareReservationsApi.FindHardwareReservationById(ctx, id).Execute()
	})
}
