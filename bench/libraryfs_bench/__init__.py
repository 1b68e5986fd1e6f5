"""Benchmarks and experiments over libraryfs (the ``libraryfs-bench`` distribution, kept out of the runtime
package): the Library Theorem benchmark, card replays and simulators, episode and code evaluation sets."""
