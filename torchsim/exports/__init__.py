"""torchsim.exports: the last stage, after torchsim.prediction.pipeline (predictions) and torchsim.sim (kernel results).

Parquet tables (`parquet`), Perfetto traces (`perfetto`, checked by `check`), tables and charts (`report`),
all written atomically (`atomic`) from the records of `records`; see docs/exports.md.
"""
