"""Fleet runs, one workload over several replicas: the replicas and the routing policy
(`replicas`), their preflight (`preflight`) and the per-replica summary (`summary`)."""
