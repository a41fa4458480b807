"""What analysis knows about one snapshot, each fact derived once (pure).

Every analyzer (``analysis/layers/<layer>/``, ``analyze(facts)``) and every hook reads the same ``Facts``:
the stack classes, the second look, the rings and each deployment's progress (with its rank groups')
are computed on first use and shared, instead of each analyzer deriving them again (14 modules called
``classify_snapshot`` per snapshot). Lazy, so a fact nobody asks for costs nothing (a snapshot without stacks, a hook that only
reads deployments).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from vllmdiag.analysis.views.deployments import Deployment, find_deployments
from vllmdiag.analysis.views.progress import Progress, all_passes, progress_and_groups
from vllmdiag.analysis.views.ring_roles import RingRole, ring_roles
from vllmdiag.analysis.views.second_look_classes import resampled_classes
from vllmdiag.analysis.views.stack_match import StackClass, classify_snapshot
from vllmdiag.model import Snapshot

SNAPSHOT_WIDE = ("all_deployments", "classes", "again", "passes")  # facts that do not depend on the deployments asked


@dataclass(eq=False)
class Facts:
    """One snapshot and the deployments asked about (``--pid`` narrows them); the rest is derived."""

    snapshot: Snapshot
    deployments: list[Deployment]
    # Keyed by the deployment object (it is kept alive beside its value): a rank group built on the fly
    # may share its deployment's id.
    _progress: dict[int, tuple[Deployment, Progress, list[tuple[Deployment, Progress]]]] = \
        field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, snapshot: Snapshot, deployments: list[Deployment] | None = None) -> Facts:
        """Every deployment of the snapshot unless told which."""
        facts = cls(snapshot, [])
        facts.deployments = facts.all_deployments if deployments is None else deployments
        return facts

    def narrowed(self, deployments: list[Deployment]) -> Facts:
        """The same snapshot's facts about fewer deployments: what is snapshot-wide is shared, not derived again."""
        out = Facts(self.snapshot, deployments, self._progress)
        for name in SNAPSHOT_WIDE:
            if name in self.__dict__:  # computed already (cached_property stores it there)
                out.__dict__[name] = self.__dict__[name]
        return out

    @cached_property
    def all_deployments(self) -> list[Deployment]:
        """Every deployment of the snapshot, whatever ``--pid`` asked (a DP world spans deployments)."""
        return find_deployments(self.snapshot)

    @cached_property
    def classes(self) -> dict[int, StackClass]:
        """pid -> the class of its first stack picture (views/stack_match.py)."""
        return classify_snapshot(self.snapshot)

    @cached_property
    def again(self) -> dict[int, StackClass]:
        """pid -> the class of its latest later look: the second look, then the confirm window's passes."""
        return resampled_classes(self.snapshot)

    @cached_property
    def rings(self) -> list[RingRole]:
        """Who writes and reads each ring of the deployments asked about (views/ring_roles.py)."""
        return ring_roles(self.snapshot, self.deployments)

    @cached_property
    def passes(self) -> list[Snapshot]:
        """The quick pass, then the confirm window's passes."""
        return all_passes(self.snapshot)

    def progress(self, dep: Deployment) -> Progress:
        """What moved in ``dep`` over every pass (views/progress.py), once per deployment."""
        return self._derive_progress(dep)[1]

    def group_progress(self, dep: Deployment) -> list[tuple[Deployment, Progress]]:
        """``dep``'s rank groups (views/rank_groups.py: itself, or each independent DP engine with its
        workers) with each one's progress: the parts ``progress(dep)`` is made of."""
        return self._derive_progress(dep)[2]

    def _derive_progress(self, dep: Deployment) -> tuple[Deployment, Progress, list[tuple[Deployment, Progress]]]:
        if id(dep) not in self._progress:
            self._progress[id(dep)] = (dep, *progress_and_groups(self.passes, dep))
        return self._progress[id(dep)]

    def progress_of(self, deployments: list[Deployment]) -> list[Progress]:
        """``progress(dep)`` of each, in order."""
        return [self.progress(dep) for dep in deployments]
