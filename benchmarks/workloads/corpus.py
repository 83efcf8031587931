"""Hand-written source text the workload builder combines into prompts (no randomness here)."""

from __future__ import annotations

# (function name, code): short, self-contained Python files.
CODE_SNIPPETS: list[tuple[str, str]] = [
    ("moving_average", '''def moving_average(values, window):
    if window <= 0:
        raise ValueError("window must be positive")
    result = []
    total = 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            result.append(total / window)
    return result
'''),
    ("parse_config", '''def parse_config(text):
    config = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        config[key.strip()] = value.strip()
    return config


def get_int(config, key, default=0):
    return int(config.get(key, default))
'''),
    ("merge_intervals", '''def merge_intervals(intervals):
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged
'''),
    ("word_counts", '''import re
from collections import Counter


def word_counts(text, top=10):
    words = re.findall(r"[a-z']+", text.lower())
    counts = Counter(words)
    return counts.most_common(top)


def print_counts(text):
    for word, count in word_counts(text):
        print(f"{word}: {count}")
'''),
    ("retry", '''import time


def retry(func, attempts=3, delay=0.5):
    last_error = None
    for attempt in range(attempts):
        try:
            return func()
        except Exception as error:
            last_error = error
            time.sleep(delay * (2 ** attempt))
    raise last_error
'''),
    ("binary_search", '''def binary_search(items, target):
    low, high = 0, len(items) - 1
    while low <= high:
        mid = (low + high) // 2
        if items[mid] == target:
            return mid
        if items[mid] < target:
            low = mid + 1
        else:
            high = mid - 1
    return -1
'''),
    ("Inventory", '''class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, quantity):
        self.items[name] = self.items.get(name, 0) + quantity

    def remove(self, name, quantity):
        if self.items.get(name, 0) < quantity:
            raise ValueError(f"not enough {name}")
        self.items[name] -= quantity

    def total(self):
        return sum(self.items.values())
'''),
    ("slugify", '''import unicodedata


def slugify(title, max_length=50):
    text = unicodedata.normalize("NFKD", title)
    text = text.encode("ascii", "ignore").decode("ascii")
    words = []
    for word in text.lower().split():
        cleaned = "".join(ch for ch in word if ch.isalnum())
        if cleaned:
            words.append(cleaned)
    return "-".join(words)[:max_length]
'''),
]

# (topic, paragraph): plain factual prose to rewrite and summarise.
PARAGRAPHS: list[tuple[str, str]] = [
    ("the water cycle", "Water evaporates from oceans, lakes and rivers when the sun heats "
     "them. The vapour rises, cools and condenses into tiny droplets that form clouds. When the "
     "droplets grow heavy, they fall as rain or snow. Some of that water flows over the ground "
     "into rivers, and some soaks into the soil to become groundwater. Plants also release water "
     "through their leaves. In time the water returns to the sea, and the cycle begins again."),
    ("the printing press", "Around 1440, Johannes Gutenberg built a printing press with movable "
     "metal type. Before his press, books were copied by hand, which was slow and expensive. "
     "The press made it possible to print hundreds of pages a day. Books became cheaper, and "
     "more people learned to read. Ideas spread faster across Europe, and the press helped the "
     "growth of science, religion and politics in the following centuries."),
    ("honey bees", "A honey bee colony has one queen, thousands of female workers and a few "
     "hundred male drones. The queen lays all the eggs. Workers collect nectar and pollen, "
     "build the wax comb, care for the young and defend the hive. Bees tell each other where "
     "flowers are with a waggle dance. A strong colony can make more than twenty kilograms of "
     "honey in a good year, which feeds the bees through the winter."),
    ("the city library", "The city library opens at nine in the morning and closes at eight in "
     "the evening on weekdays. On Saturdays it closes at five, and on Sundays it is closed. "
     "Members can borrow up to ten books for three weeks. Late returns cost twenty cents per "
     "book per day. The library also lends laptops, offers free language classes on Tuesday "
     "evenings and has a quiet reading room on the second floor."),
    ("volcanoes", "A volcano forms where molten rock, called magma, rises through cracks in the "
     "crust of the earth. When the pressure becomes too high, the volcano erupts and the magma "
     "flows out as lava. Some eruptions are quiet, with slow rivers of lava. Others are "
     "explosive and throw ash high into the sky. Volcanic ash makes the soil rich, so farmers "
     "often live near volcanoes despite the danger."),
    ("the project meeting", "The project meeting took place on Monday. The team agreed to move "
     "the release date from March to April because the payment module needs more testing. "
     "Anna will finish the test plan by Friday. Ben will fix the login bug and review the "
     "database changes. The designers will deliver the new icons next week. The next meeting "
     "is on Thursday at ten, in the small conference room."),
    ("sleep", "Adults need seven to nine hours of sleep each night. During sleep, the body "
     "repairs muscles and the brain stores memories. People who sleep too little find it "
     "harder to concentrate and are more likely to catch colds. Going to bed at the same time "
     "every night, keeping the bedroom dark and avoiding screens before bed all help people "
     "fall asleep faster and sleep more deeply."),
    ("the bicycle", "The first bicycles, built in the early nineteenth century, had no pedals: "
     "riders pushed them along with their feet. Pedals were added to the front wheel in the "
     "1860s. The safety bicycle of the 1880s had two wheels of the same size and a chain that "
     "drove the rear wheel, the design most bicycles still use today. Bicycles are cheap, quiet "
     "and healthy, and many cities now build special lanes for them."),
]

# (goal, steps): plans a planning agent re-emits turn after turn.
PLANS: list[tuple[str, list[str]]] = [
    ("migrate the user database to PostgreSQL", [
        "Export the current user table to CSV", "Create the new PostgreSQL schema",
        "Write a script that imports the CSV", "Run the import on a staging copy",
        "Compare row counts and checksums", "Switch the application to the new database"]),
    ("publish a Python package", [
        "Write the pyproject.toml file", "Add a README with usage examples",
        "Run the test suite on Python 3.10 to 3.12", "Build the wheel and the sdist",
        "Upload to the test index and install it", "Upload to the real index and tag the release"]),
    ("organise a team offsite", [
        "Collect the available dates from everyone", "Choose a venue near the train station",
        "Book rooms and meals", "Plan the agenda with two workshops",
        "Send the invitations and the travel details", "Collect feedback after the event"]),
    ("fix a memory leak in the web server", [
        "Reproduce the leak with a load test", "Take heap snapshots every ten minutes",
        "Compare the snapshots to find the growing objects", "Find the code that keeps them",
        "Write a fix and a regression test", "Deploy to one server and watch memory for a day"]),
]

CHARACTERS = ["a lighthouse keeper", "a young dragon", "a robot gardener", "a retired detective",
              "a shy violinist", "a talking cat", "an astronaut on Mars", "a village baker"]
GOALS = ["finds a mysterious map", "must cross a frozen river", "learns to trust a stranger",
         "loses something important"]
CONCEPTS = ["how vaccines work", "why the sky is blue", "what inflation is",
            "how a compiler works", "what a black hole is", "how bridges carry weight",
            "why we have seasons", "how the internet routes data"]
AUDIENCES = ["a ten-year-old", "a busy manager", "a history student", "a curious grandparent"]
