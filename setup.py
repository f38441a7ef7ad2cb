"""The optional compiled parts of broker-spark; everything else is in pyproject.toml.

``broker_spark.zeek._record_walk`` walks Zeek's log records and ``broker_spark.zeek._zeek_texts``
spells their texts and JSON lines, in C (``broker_spark/zeek/compiled.py`` says more). Both
are ``optional``: where no C compiler is, the build goes on without them and the numpy and
Arrow code, which the tests hold equal to them, does the work.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(f"broker_spark.zeek.{name}", [f"broker_spark/zeek/{name}.c"], optional=True)
        for name in ("_zeek_texts", "_record_walk")
    ]
)
