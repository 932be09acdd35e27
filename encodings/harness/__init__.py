"""The harness: what turns claims into verdicts on encoders.

Bottom to top (a module imports only those above it in this list, and ``posenc.encoders``):

* :mod:`.claims` - the catalogue's IDs and :class:`ClaimViolation`;
* :mod:`.records` - :class:`EncoderRecord` and its parts (declarations, tolerances, geometry);
* :mod:`.declarations` - what each family of designs claims; :func:`rotary_claims`;
* :mod:`.builtin_records` - the built-in records, a plain tuple (data);
* :mod:`.registry` - built-ins plus plug-ins; :func:`register`, :func:`load_plugin`;
* :mod:`.reference`, :mod:`.tensors` - float64 formulas, inputs and views;
* :mod:`.running`, :mod:`.contract`, :mod:`.isolation` - the spec that is running, cells that
  cannot be judged, torch's global state around each spec;
* :mod:`.matrix`, :mod:`.reports` - outcomes into the claims × encoders matrix, and its reports;
* :mod:`.machine`, :mod:`.profiling`, :mod:`.perf_rules`, :mod:`.history`, :mod:`.plots`,
  :mod:`.summaries`, :mod:`.perf_report` - measurements, the rules for the performance claims,
  saved runs and gates, pictures, TensorBoard and the perf summary;
* :mod:`.options`, :mod:`.parallel` - options checked before collection, pytest-xdist;
* :mod:`.spec_index` - which spec decides which claim;
* :mod:`.pytest_plugin` - the one pytest plug-in that drives specs and benchmarks.
"""
