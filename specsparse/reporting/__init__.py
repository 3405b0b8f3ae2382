"""Reporting: tables and figures rebuilt from job outputs, ablations, the mixed-stream comparison,
and W&B logging and Reports."""
