package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Pool is what MetalVRFIPPool and GlobalMetalVRFIPPool share: one spec, one
// status, different scope. Controllers and webhooks handle both through it.
//
// +kubebuilder:object:generate=false
type Pool interface {
	metav1.Object
	runtime.Object
	PoolSpec() *MetalVRFIPPoolSpec
	PoolStatus() *MetalVRFIPPoolStatus
	GetConditions() []metav1.Condition
	SetConditions([]metav1.Condition)
}

var (
	_ Pool = &MetalVRFIPPool{}
	_ Pool = &GlobalMetalVRFIPPool{}
)

// PoolSpec returns the pool's spec.
func (p *MetalVRFIPPool) PoolSpec() *MetalVRFIPPoolSpec { return &p.Spec }

// PoolStatus returns the pool's status.
func (p *MetalVRFIPPool) PoolStatus() *MetalVRFIPPoolStatus { return &p.Status }

// GetConditions returns the pool's conditions.
func (p *MetalVRFIPPool) GetConditions() []metav1.Condition { return p.Status.Conditions }

// SetConditions replaces the pool's conditions.
func (p *MetalVRFIPPool) SetConditions(c []metav1.Condition) { p.Status.Conditions = c }

// PoolSpec returns the pool's spec.
func (p *GlobalMetalVRFIPPool) PoolSpec() *MetalVRFIPPoolSpec { return &p.Spec }

// PoolStatus returns the pool's status.
func (p *GlobalMetalVRFIPPool) PoolStatus() *MetalVRFIPPoolStatus { return &p.Status }

// GetConditions returns the pool's conditions.
func (p *GlobalMetalVRFIPPool) GetConditions() []metav1.Condition { return p.Status.Conditions }

// SetConditions replaces the pool's conditions.
func (p *GlobalMetalVRFIPPool) SetConditions(c []metav1.Condition) { p.Status.Conditions = c }
