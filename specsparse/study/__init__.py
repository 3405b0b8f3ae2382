"""A job's study (`study.Study`: its search and measurements through the store), the loop (the driver
that asks a strategy for candidates), the results store every measurement goes to, and the runners
that measure (in this process or on Ray workers)."""
