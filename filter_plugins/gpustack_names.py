"""Suggestions for a variable name no role declares (site.yml's preflight warning).

    {{ 'nvidia_drvier_branch' | gpustack_did_you_mean(site_declared_variables) }}
    -> ['nvidia_driver_branch']

A name with the same letters in another order (a typing slip) is the best suggestion; only when
there is none, names with the same first and last word (nvidia_..._branch) are offered.
"""

from __future__ import annotations


def did_you_mean(name: str, declared: list[str]) -> list[str]:
    anagrams = [known for known in declared if known != name and sorted(known) == sorted(name)]
    if anagrams:
        return sorted(anagrams)
    words = name.split("_")
    ends = (words[0], words[-1])
    return sorted(
        known
        for known in declared
        if known != name and (known.split("_")[0], known.split("_")[-1]) == ends
    )


class FilterModule:
    def filters(self):
        return {"gpustack_did_you_mean": did_you_mean}
