package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// PacketMachineTemplateResource is what a PacketMachine is made from.
type PacketMachineTemplateResource struct {
	// ObjectMeta is copied to the PacketMachines made from the template.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// Spec of the PacketMachines made from the template.
	// +required
	Spec PacketMachineSpec `json:"spec"`
}

// PacketMachineTemplateSpec holds the template.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="PacketMachineTemplate spec is immutable: create a new template and point the MachineDeployment or control plane at it"
type PacketMachineTemplateSpec struct {
	// Template of the PacketMachines.
	// +required
	Template PacketMachineTemplateResource `json:"template"`
}

// PacketMachineTemplate is the template MachineDeployments and control planes
// make PacketMachines from.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1beta1"
// +kubebuilder:resource:path=packetmachinetemplates,scope=Namespaced,categories=cluster-api,shortName=pmt
// +kubebuilder:printcolumn:name="Plan",type="string",JSONPath=".spec.template.spec.plan"
// +kubebuilder:printcolumn:name="MachineType",type="string",JSONPath=".spec.template.spec.machineType",priority=1
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type PacketMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec PacketMachineTemplateSpec `json:"spec,omitempty"`
}

// PacketMachineTemplateList is a list of PacketMachineTemplates.
//
// +kubebuilder:object:root=true
type PacketMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PacketMachineTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &PacketMachineTemplate{}, &PacketMachineTemplateList{})
}
