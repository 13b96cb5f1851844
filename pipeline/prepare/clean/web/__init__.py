"""The web filters, as FineWeb and DCLM run them: language identification (`language_filter`) and
any fastText classifier (`classifier_filter`) by fastText models (`fasttext_models`), and PII
replacement (`pii`). Each is a rule of the filter chain (`quality.fast_filters`), with datatrove's
parameters, defaults and decisions."""
