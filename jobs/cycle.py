"""One job cycle: reconcile jobs with the cluster, admit and place queued work, create workloads."""
