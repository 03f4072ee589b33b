package controllers

import (
	"context"
	"fmt"
	"maps"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// createdLabels are the labels of an object the provider creates for owner
// in the Cluster named cluster: the cluster-name label and owner's
// watch-filter label, without which a manager sharded by --watch-filter
// would never see the object's events (a claim getting bound).
func createdLabels(owner client.Object, cluster string) map[string]string {
	labels := map[string]string{clusterv1.ClusterNameLabel: cluster}
	if shard, ok := owner.GetLabels()[clusterv1.WatchLabel]; ok {
		labels[clusterv1.WatchLabel] = shard
	}
	return labels
}

// addLabels sets labels on obj's labels, creating them if need be.
func addLabels(obj client.Object, labels map[string]string) {
	all := obj.GetLabels()
	if all == nil {
		all = map[string]string{}
	}
	maps.Copy(all, labels)
	obj.SetLabels(all)
}

// keepShardLabel gives obj, made for owner by a version that did not label
// what it made, owner's watch-filter label.
func keepShardLabel(ctx context.Context, c client.Client, obj, owner client.Object) error {
	shard, ok := owner.GetLabels()[clusterv1.WatchLabel]
	if !ok || obj.GetLabels()[clusterv1.WatchLabel] == shard {
		return nil
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	addLabels(obj, map[string]string{clusterv1.WatchLabel: shard})
	if err := c.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("labelling %s with %s=%s: %w", obj.GetName(), clusterv1.WatchLabel, shard, err)
	}
	return nil
}
