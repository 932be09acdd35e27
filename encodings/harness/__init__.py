"""The harness: what turns claims into verdicts on encoders.

Bottom to top (a module imports only those above it in this list, and ``posenc.encoders``):

* :mod:`.states` - the one vocabulary of declared, judged and aggregated states;
* :mod:`.claims` - the catalogue's IDs and :class:`ClaimViolation`;
* :mod:`.records` - :class:`EncoderRecord` and its groups (calling, geometry, declarations, limits);
* :mod:`.declarations` - what each family of designs claims; :func:`rotary_claims`;
* :mod:`.record_builders` - constructors that state each fact of a record once (:func:`rotary_record`);
* :mod:`.builtin_records`, :mod:`.published_records` - the built-in records, plain tuples (data);
* :mod:`.spec_index`, :mod:`.registry` - which spec decides which claim; built-ins plus plug-ins,
  :func:`register` (which checks every spec name a declaration aims at), :func:`load_plugin`;
* :mod:`.reference`, :mod:`.tensors`, :mod:`.protocols` - float64 formulas, inputs and call protocols;
* :mod:`.options`, :mod:`.selection` - options checked before collection; which encoders a run judges;
* :mod:`.parametrization` - one case per (spec, encoder, dtype), with its declared expectation;
* :mod:`.running`, :mod:`.contract`, :mod:`.isolation`, :mod:`.execution` - the spec that is running,
  cells that cannot be judged, torch's global state, a case run under its timeout;
* :mod:`.judge` - what a case raised, against its declaration, as a state with reproducers;
* :mod:`.matrix`, :mod:`.session`, :mod:`.reports`, :mod:`.terminal` - outcomes into the claims ×
  encoders matrix (built once), the run's state and header, the written reports, the printed summary;
* :mod:`.machine`, :mod:`.profiling`, :mod:`.perf_rules`, :mod:`.history`, :mod:`.plots`,
  :mod:`.summaries`, :mod:`.perf_report`, :mod:`.benchmark_gates` - measurements, the rules for the
  performance claims, saved runs and gates, pictures, TensorBoard and the perf summary;
* :mod:`.parallel` - pytest-xdist;
* :mod:`.pytest_plugin` - the hooks, each handing its work to one of the modules above.
"""
