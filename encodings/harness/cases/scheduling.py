"""pytest-xdist's ``loadgroup`` scheduler, made to survive a worker that dies mid-run.

When a worker dies (an encoder's segfault or ``os._exit``, the out-of-memory killer), pytest-xdist
3.8 replaces it and reports the test it was running as failed; its ``loadgroup`` scheduler then
hangs the run forever (pytest-xdist#1323, #1327, #1378; fixes merged upstream after 3.8, one open):

* the dead worker's *completed* groups go back on the queue, and a worker sent a group with nothing
  left to run never asks for more;
* a replacement worker sent a single test waits for a second one (it needs the next item to run
  its current one) that never comes;
* the test the worker died on goes back on the queue and kills the replacement too (#1371).

:class:`SurvivingLoadGroupScheduling` is ``LoadGroupScheduling`` with those three fixed: only
unfinished tests are requeued, the one that killed the worker is not, and a worker is kept at two
pending tests, or told that none will come. The harness records the dead worker's test as a CRASH
with the reason (:mod:`..verdicts.journal`).
"""

from __future__ import annotations

from xdist.scheduler import LoadGroupScheduling


class SurvivingLoadGroupScheduling(LoadGroupScheduling):
    """``--dist loadgroup`` that neither hangs nor reruns the killer after a worker dies."""

    def remove_node(self, node) -> str | None:
        workload = self.assigned_work.pop(node)
        pending = {scope: unit for scope, unit in workload.items() if not all(unit.values())}
        if not pending:
            return None
        crashed = next(nodeid for unit in pending.values() for nodeid, done in unit.items() if not done)
        for unit in pending.values():
            if crashed in unit:
                unit[crashed] = True  # reported as a crash by pytest-xdist; running it again kills again
        self.workqueue.update((scope, unit) for scope, unit in pending.items() if not all(unit.values()))
        for other in self.assigned_work:
            self._reschedule(other)
        return crashed

    def _reschedule(self, node) -> None:
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        # A worker runs a test only once it knows the next one (or that there is none): more than two queued.
        while self.workqueue and self._pending_of(self.assigned_work[node]) <= 2:
            self._assign_work_unit(node)
        if not self.workqueue:
            node.shutdown()
