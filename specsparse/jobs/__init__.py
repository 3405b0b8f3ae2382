"""Jobs: a validated configuration runs one search on the calibration split, evaluates the selection
on the test split, stores every measurement, and writes outputs, reports and W&B runs."""
