-- PostgreSQL twin of migrations/021-rental-cluster-node.sql: the cluster node that launched a
-- rental, the only one that runs its ticks and serves its notebook (NULL: made before clusters).
ALTER TABLE rentals ADD COLUMN cluster_node TEXT;
