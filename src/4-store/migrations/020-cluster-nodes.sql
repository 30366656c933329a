-- PostgreSQL only (pg/migrations/020-cluster-nodes.sql: the nodes of a cluster). A SQLite store is
-- one node.
SELECT 1;
