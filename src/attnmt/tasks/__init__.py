"""Built-in tasks: data that ship with the package, and what runs them.

    dates.py        synthetic dates in many languages and formats -> ISO dates (the generator)
    quickstart.py   `attnmt quickstart`: train a small model on the dates and print its attention
"""
