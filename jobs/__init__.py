"""PySpark jobs over the archive (run on EMR Serverless, or locally with ``local[*]``)."""
