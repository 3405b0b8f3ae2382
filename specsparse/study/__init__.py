"""The study loop: the driver that asks a strategy for candidates, the results store every
measurement goes to, and the runners that measure (in this process or on Ray workers)."""
