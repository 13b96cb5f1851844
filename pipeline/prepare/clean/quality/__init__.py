"""Quality filters: datatrove's Gopher, C4 and FineWeb rules, by the fast implementation or
datatrove's own classes (`quality_filters` says which a run asks for)."""
