"""Cluster watcher: Pods, Nodes and Deployments → taskevents.v1 (Borg vocabulary) and clusterstate.v1."""
