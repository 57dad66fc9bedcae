"""The Spark engine worker: ODF transforms on PySpark, behind the ODF engine gRPC protocol.

* :mod:`engine.spark_engine` — the transform itself (kamu-engine-spark 0.23.1 semantics);
* :mod:`engine.sandbox` — refuses hostile SQL on Spark's parsed and analysed plans;
* :mod:`engine.worker` — the long-lived gRPC server process (``python -m engine.worker``).

The coordinator never imports this package: it talks to the worker through
``node.engine_client.EngineClient`` (or uses :class:`engine.spark_engine.SparkEngine` in-process
in tests and benchmarks).
"""
