-- Revenue per nation and the nations that lead it.

-- A streaming table is where spark-pipelines appends; lakeivm reads the lake's table of that name.
CREATE STREAMING TABLE lineitem_stream AS SELECT * FROM STREAM(lineitem);

CREATE MATERIALIZED VIEW revenue_by_nation
COMMENT 'Revenue per customer nation'
AS SELECT n.n_name, SUM(l.l_extendedprice * (1 - l.l_discount)) AS revenue, COUNT(*) AS lines
   FROM lineitem l
   JOIN orders o ON l.l_orderkey = o.o_orderkey
   JOIN customer c ON o.o_custkey = c.c_custkey
   JOIN nation n ON c.c_nationkey = n.n_nationkey
   GROUP BY n.n_name;

-- lakeivm: deadline=1m
CREATE MATERIALIZED VIEW leading_nations
AS SELECT n_name, revenue FROM revenue_by_nation ORDER BY revenue DESC LIMIT 5;
