package controllers

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
)

// A fact is what a reconcile observed about one condition's subject: one of
// the types of claim_status.go or pool_status.go, never a reason or a
// message. The phases only record facts; the status files turn them into
// conditions.
type fact any

// setCondition writes c as observed at the object's generation, its
// message bounded: messages quote user values and Metal answers.
func setCondition(obj interface {
	conditions.Setter
	GetGeneration() int64
}, c metav1.Condition) {
	c.Message = message.Bound(c.Message)
	c.ObservedGeneration = obj.GetGeneration()
	conditions.Set(obj, c)
}

func falseCondition(conditionType, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: conditionType, Status: metav1.ConditionFalse, Reason: reason, Message: msg}
}

func trueCondition(conditionType, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: conditionType, Status: metav1.ConditionTrue, Reason: reason, Message: msg}
}

// unknownFact is the condition of a fact its derivation does not know:
// Unknown, never a guess, which the table tests catch.
func unknownFact(conditionType string, f fact) metav1.Condition {
	return metav1.Condition{Type: conditionType, Status: metav1.ConditionUnknown, Reason: "UnknownFact", Message: fmt.Sprintf("%T", f)}
}
