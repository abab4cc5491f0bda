"""The live arena (issue 21 item 2): the arena's comparison through the real system, at small scale.

``kube``: the Kubernetes side — kwok nodes of one run, a private kube-scheduler per policy (the
default profile, or the project's extender configuration), arena tasks as Jobs that kwok runs for
their duration, and a view of where each pod ran and when.
"""
