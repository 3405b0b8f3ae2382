"""Jobs: a validated configuration runs one search on the calibration split (through the study loop,
`specsparse.study`), evaluates the selection on the test split, and writes the job's outputs."""
