"""Measuring kernelrag: the suite runner (``runner``), its report (``report``) and the
seed-skill measurement (``measure_skills``). Each runs where only torch and triton exist."""
