package sim

// Operation names an API operation the simulator serves. The names are the
// operationIds of the Metal API's OpenAPI document, which the client package
// also uses as its metrics labels.
type Operation string

// The operations the simulator serves.
const (
	OpFindVrfs                      Operation = "findVrfs"
	OpFindVrfByID                   Operation = "findVrfById"
	OpFindVrfIPReservations         Operation = "findVrfIpReservations"
	OpFindVrfIPReservation          Operation = "findVrfIpReservation"
	OpRequestIPReservation          Operation = "requestIPReservation"
	OpFindIPReservations            Operation = "findIPReservations"
	OpFindIPAddressByID             Operation = "findIPAddressById"
	OpDeleteIPAddress               Operation = "deleteIPAddress"
	OpFindMetalGatewaysByProject    Operation = "findMetalGatewaysByProject"
	OpFindMetalGatewayByID          Operation = "findMetalGatewayById"
	OpFindVirtualNetworks           Operation = "findVirtualNetworks"
	OpGetVirtualNetwork             Operation = "getVirtualNetwork"
	OpCreateDevice                  Operation = "createDevice"
	OpFindProjectDevices            Operation = "findProjectDevices"
	OpFindDeviceByID                Operation = "findDeviceById"
	OpDeleteDevice                  Operation = "deleteDevice"
	OpFindDeviceEvents              Operation = "findDeviceEvents"
	OpPerformAction                 Operation = "performAction"
	OpCreateIPAssignment            Operation = "createIPAssignment"
	OpFindHardwareReservationByID   Operation = "findHardwareReservationById"
	OpFindPortByID                  Operation = "findPortById"
	OpAssignPort                    Operation = "assignPort"
	OpUnassignPort                  Operation = "unassignPort"
	OpConvertLayer2                 Operation = "convertLayer2"
	OpConvertLayer3                 Operation = "convertLayer3"
	OpBondPort                      Operation = "bondPort"
	OpDisbondPort                   Operation = "disbondPort"
	OpAssignNativeVlan              Operation = "assignNativeVlan"
	OpDeleteNativeVlan              Operation = "deleteNativeVlan"
	OpCreatePortVlanAssignmentBatch Operation = "createPortVlanAssignmentBatch"
	OpFindPortVlanAssignmentBatches Operation = "findPortVlanAssignmentBatches"
	OpFindPortVlanAssignmentBatch   Operation = "findPortVlanAssignmentBatchByPortIdAndBatchId"
)

// The metadata service's operations, which a node calls (not API
// operationIds: the service has none).
const (
	OpGetMetadata        Operation = "getMetadata"
	OpPostUserStateEvent Operation = "postUserStateEvent"
)
