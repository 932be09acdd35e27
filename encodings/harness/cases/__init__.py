"""Running a case: from a spec to its cases, each run under its timeout and judged against its declaration, in one process or many."""
