#!/usr/bin/env python
"""Grow the built-in example sets in specsparse/data/builtin/ to 110-120 examples per domain.

    python scripts/build_builtin_sets.py            # (re)write the new rows of every domain
    python scripts/build_builtin_sets.py --check    # exit 1 when a file differs from what this script makes

The original rows of every file (the first ORIGINAL[domain].rows lines) are kept byte for byte: the
script checks their SHA-256 and refuses to run when they changed. Everything after them is
regenerated from this script, with ids continuing the numbering ("math-028", ...), so running it
twice gives identical files.

Content: math and rag are generated from templates with fixed seeds (math rationales are
recomputed and checked; rag answers appear verbatim in the answering passage); translation,
summarization, qa, mmlu and mt_bench are hand-written data lists below. mmlu_dev.jsonl is not
touched (every new mmlu question uses one of the four existing subjects).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
from fractions import Fraction
from pathlib import Path
from typing import NamedTuple

BUILTIN_DIR = Path(__file__).resolve().parents[1] / "specsparse" / "data" / "builtin"


class Original(NamedTuple):
    rows: int  # number of original lines at the top of the file
    sha256: str  # SHA-256 of those lines (bytes, newlines included)


ORIGINAL = {
    "translation": Original(28, "05ea1366fe3676f81034cf26ecd0ceab34356272c8778a72256a47ceeb39d738"),
    "summarization": Original(26, "42e5f3625442844a4f8544bc1f39066a41772eeee8d543dc247099693ab73daf"),
    "qa": Original(28, "392254a24307cf8b4f67427443972bcd871af7e2d8186f6d2b40f3832b76a778"),
    "math": Original(27, "d5d37479d85072f53837519e0ceb1c725e1f5810a8e0bb6a06cd76e2c6751ae2"),
    "rag": Original(26, "971b86f7a59df9fffaf8ae7f45ae2de9e438727dc379af7b2d03896114d8b28f"),
    "mt_bench": Original(24, "2e372098ec5443515c2db82bf2c793606520482bc7e55ee357a2582c6430c8df"),
    "mmlu": Original(28, "c37de92fdedcb10e14bcce6126123b6863282c38c0daa8989bb14115d3345620"),
}

# --------------------------------------------------------------------------- math (generated)

MATH_SEED = 20240601
MATH_COUNT = 88

PEOPLE = [
    ("Amara", "she", "her"), ("Ben", "he", "his"), ("Chloe", "she", "her"), ("Diego", "he", "his"),
    ("Elif", "she", "her"), ("Farid", "he", "his"), ("Grace", "she", "her"), ("Hugo", "he", "his"),
    ("Ines", "she", "her"), ("Jonas", "he", "his"), ("Keiko", "she", "her"), ("Liam", "he", "his"),
    ("Maya", "she", "her"), ("Nikhil", "he", "his"), ("Olga", "she", "her"), ("Pedro", "he", "his"),
    ("Rosa", "she", "her"), ("Samir", "he", "his"), ("Tara", "she", "her"), ("Victor", "he", "his"),
    ("Wen", "she", "her"), ("Yusuf", "he", "his"), ("Zoe", "she", "her"), ("Oscar", "he", "his"),
    ("Priya", "she", "her"), ("Kwame", "he", "his"), ("Lucia", "she", "her"), ("Mateo", "he", "his"),
]


def _cap(word: str) -> str:
    return word[:1].upper() + word[1:]


def _m_give_buy(r, who):
    name, he, his = who
    item = r.choice(["stickers", "marbles", "stamps", "postcards", "trading cards", "seashells"])
    a = r.randint(25, 90)
    b = r.randint(4, a // 2)
    c = r.randint(5, 40)
    rel = r.choice(["cousin", "best friend", "little sister", "neighbour", "classmate"])
    q = f"{name} has {a} {item}. {_cap(he)} gives {b} of them to {his} {rel} and then gets {c} more at a fair. How many {item} does {name} have now?"
    lines = [f"After giving some away {he} has {a} - {b} = {a - b} {item}.",
             f"After the fair {he} has {a - b} + {c} = {a - b + c} {item}."]
    return q, lines, a - b + c


def _m_packs_left(r, who):
    name, he, his = who
    item = r.choice(["pencils", "balloons", "paper cups", "batteries", "candles", "envelopes"])
    per = r.choice([6, 8, 10, 12, 15, 20, 24])
    packs = r.randint(3, 9)
    used = r.randint(per, per * packs - 3)
    purpose = r.choice(["a school project", "a party", "the office", "a summer camp"])
    q = f"{name} buys {packs} packs of {item} with {per} {item} in each pack. {_cap(he)} uses {used} of them for {purpose}. How many {item} are left?"
    total = per * packs
    lines = [f"{_cap(he)} buys {packs} * {per} = {total} {item}.",
             f"There are {total} - {used} = {total - used} {item} left."]
    return q, lines, total - used


def _m_weeks(r, who):
    name, he, his = who
    act, unit, verb = r.choice([("reads", "pages", "read"), ("swims", "lengths", "swim"),
                                ("practises the piano for", "minutes", "practise"),
                                ("cycles", "kilometres", "cycle"), ("writes", "lines of poetry", "write")])
    a = r.randint(6, 45)
    w = r.randint(2, 5)
    q = f"{name} {act} {a} {unit} every day. How many {unit} does {he} {verb} in {w} weeks?"
    days = w * 7
    lines = [f"{w} weeks is {w} * 7 = {days} days.",
             f"In total {he} {act} {a} * {days} = {a * days} {unit}."]
    return q, lines, a * days


def _m_two_items(r, who):
    name, he, his = who
    (i1, i1s), (i2, i2s) = r.sample([("notebook", "notebooks"), ("sandwich", "sandwiches"), ("T-shirt", "T-shirts"),
                                     ("ticket", "tickets"), ("plant pot", "plant pots"), ("mug", "mugs"),
                                     ("scarf", "scarves"), ("puzzle", "puzzles")], 2)
    p, s = r.randint(3, 25), r.randint(3, 25)
    n1, n2 = r.randint(2, 6), r.randint(2, 6)
    q = f"A {i1} costs ${p} and a {i2} costs ${s}. {name} buys {n1} {i1s} and {n2} {i2s}. How much does {he} spend in total?"
    lines = [f"The {i1s} cost {n1} * {p} = ${n1 * p}.",
             f"The {i2s} cost {n2} * {s} = ${n2 * s}.",
             f"In total {he} spends {n1 * p} + {n2 * s} = ${n1 * p + n2 * s}."]
    return q, lines, n1 * p + n2 * s


def _m_change(r, who):
    name, he, his = who
    item = r.choice(["croissants", "bus tickets", "apples", "comic books", "candles", "coffees"])
    n, p = r.randint(2, 7), r.randint(2, 12)
    cost = n * p
    bill = next(b for b in (10, 20, 50, 100) if b > cost)
    q = f"{name} buys {n} {item} at ${p} each and pays with a ${bill} note. How much change does {he} get?"
    lines = [f"The {item} cost {n} * {p} = ${cost}.",
             f"The change is {bill} - {cost} = ${bill - cost}."]
    return q, lines, bill - cost


def _m_groups(r, who):
    people = r.choice(["pupils", "tourists", "scouts", "choir members", "football fans"])
    vehicle, vehicles = r.choice([("minibus", "minibuses"), ("van", "vans"), ("boat", "boats"), ("car", "cars")])
    k = {"minibus": r.choice([12, 14, 16]), "van": r.choice([7, 8, 9]), "boat": r.choice([10, 12, 20]), "car": 4}[vehicle]
    m = r.randint(3, 12)
    n = k * m
    q = f"There are {n} {people} on a trip. They travel in {vehicles} that each carry {k} people. If every {vehicle} is full, how many {vehicles} are there?"
    lines = [f"There are {n} / {k} = {m} {vehicles}."]
    return q, lines, m


def _m_fraction_sold(r, who):
    shop = r.choice(["A bakery", "A market stall", "A school canteen", "A farm shop", "A food truck"])
    item = r.choice(["muffins", "pies", "bread rolls", "pasties", "doughnuts", "jars of jam"])
    a, b = r.choice([(1, 2), (1, 3), (2, 3), (1, 4), (3, 4), (2, 5), (3, 5), (5, 6)])
    n = b * r.randint(8, 40)
    sold = n * a // b
    q = f"{shop} made {n} {item} and sold {a}/{b} of them by noon. How many {item} were left?"
    lines = [f"It sold {n} * {a} / {b} = {sold} {item}.",
             f"There were {n} - {sold} = {n - sold} {item} left."]
    return q, lines, n - sold


def _m_saving(r, who):
    name, he, his = who
    a = r.choice([4, 5, 6, 8, 10, 12, 15, 20, 25])
    k = r.randint(4, 20)
    start = r.choice([0, 0, a * r.randint(1, 5)])
    goal = start + a * k
    thing = r.choice(["a bicycle", "a pair of headphones", "a guitar", "a tent", "a camera", "a telescope"])
    if start:
        q = f"{name} wants to buy {thing} that costs ${goal}. {_cap(he)} already has ${start} and saves ${a} every week. How many weeks does {he} need to save?"
        lines = [f"{_cap(he)} still needs {goal} - {start} = ${goal - start}.",
                 f"That takes {goal - start} / {a} = {k} weeks."]
    else:
        q = f"{name} saves ${a} every week to buy {thing} that costs ${goal}. How many weeks does {he} need to save?"
        lines = [f"{_cap(he)} needs {goal} / {a} = {k} weeks."]
    return q, lines, k


def _m_speed(r, who):
    vehicle = r.choice(["train", "coach", "ferry", "delivery truck", "tractor"])
    v1, h1 = r.choice([40, 50, 60, 70, 80, 90]), r.randint(2, 5)
    if r.random() < 0.5:
        q = f"A {vehicle} travels at {v1} kilometres per hour. How many kilometres does it travel in {h1} hours?"
        lines = [f"It travels {v1} * {h1} = {v1 * h1} kilometres."]
        return q, lines, v1 * h1
    v2, h2 = r.choice([30, 45, 55, 65, 75]), r.randint(2, 3)
    q = f"A {vehicle} travels at {v1} kilometres per hour for {h1} hours and then at {v2} kilometres per hour for {h2} hours. How many kilometres does it travel in total?"
    lines = [f"First it travels {v1} * {h1} = {v1 * h1} kilometres.",
             f"Then it travels {v2} * {h2} = {v2 * h2} kilometres.",
             f"In total it travels {v1 * h1} + {v2 * h2} = {v1 * h1 + v2 * h2} kilometres."]
    return q, lines, v1 * h1 + v2 * h2


def _m_half_left(r, who):
    name, he, his = who
    first = r.choice(["a book", "a train ticket", "lunch", "a haircut", "a birthday card"])
    second = r.choice(["a video game", "a jacket", "a pair of shoes", "a gift for a friend", "a football"])
    a = r.randint(5, 30)
    rest = 2 * r.randint(10, 60)
    m = a + rest
    q = f"{name} had ${m}. {_cap(he)} spent ${a} on {first} and then half of the remaining money on {second}. How much money does {he} have left?"
    lines = [f"After paying for {first} {he} had {m} - {a} = ${rest}.",
             f"{_cap(he)} spent {rest} / 2 = ${rest // 2} on {second}, so {he} has ${rest // 2} left."]
    return q, lines, rest // 2


def _m_fence(r, who):
    place = r.choice(["garden", "playground", "paddock", "vegetable patch", "dog run"])
    long, wide = r.randint(8, 40), r.randint(4, 25)
    if long == wide:
        long += 3
    c = r.randint(3, 15)
    p = 2 * long + 2 * wide
    q = f"A rectangular {place} is {long} metres long and {wide} metres wide. A fence costs ${c} per metre. How much does it cost to put a fence all the way around it?"
    lines = [f"The perimeter is 2 * {long} + 2 * {wide} = {p} metres.",
             f"The fence costs {p} * {c} = ${p * c}."]
    return q, lines, p * c


def _m_area(r, who):
    place = r.choice(["classroom floor", "kitchen floor", "patio", "hall floor"])
    long, wide = r.randint(4, 12), r.randint(3, 10)
    long, wide = max(long, wide), min(long, wide)
    c = r.randint(8, 30)
    q = f"A {place} is {long} metres long and {wide} metres wide. Tiles cost ${c} per square metre. How much do the tiles for the whole {place} cost?"
    lines = [f"The area is {long} * {wide} = {long * wide} square metres.",
             f"The tiles cost {long * wide} * {c} = ${long * wide * c}."]
    return q, lines, long * wide * c


def _m_times_as_many(r, who):
    place, (x, y) = r.choice([("A farm", ("goats", "hens")), ("A pond", ("frogs", "tadpoles")),
                              ("A library", ("magazines", "books")), ("A car park", ("motorbikes", "cars")),
                              ("An orchard", ("pear trees", "apple trees"))])
    a, k = r.randint(6, 60), r.randint(2, 6)
    q = f"{place} has {a} {x} and {k} times as many {y}. How many {x} and {y} are there altogether?"
    lines = [f"There are {a} * {k} = {a * k} {y}.",
             f"Altogether there are {a} + {a * k} = {a + a * k}."]
    return q, lines, a + a * k


def _m_discount(r, who):
    item = r.choice(["coat", "lamp", "scooter", "camera", "sofa", "printer", "suitcase"])
    d = r.choice([10, 20, 25, 30, 40, 50])
    step = {10: 10, 20: 5, 25: 4, 30: 10, 40: 5, 50: 2}[d]
    p = step * r.randint(max(2, 40 // step), 400 // step)
    disc = p * d // 100
    q = f"A {item} costs ${p}. In a sale it is {d}% off. What is the sale price in dollars?"
    lines = [f"The discount is {p} * {d} / 100 = ${disc}.",
             f"The sale price is {p} - {disc} = ${p - disc}."]
    return q, lines, p - disc


def _m_tank(r, who):
    thing = r.choice(["rain barrel", "fish tank", "water tank", "paddling pool", "fuel tank"])
    pct = r.choice([10, 20, 25, 30, 40, 60, 75, 80])
    step = 100 // __import__("math").gcd(100, pct)
    cap = step * r.randint(max(1, 40 // step), 800 // step)
    have = cap * pct // 100
    q = f"A {thing} holds {cap} litres and is {pct}% full. How many more litres are needed to fill it?"
    lines = [f"It contains {cap} * {pct} / 100 = {have} litres.",
             f"It needs {cap} - {have} = {cap - have} more litres."]
    return q, lines, cap - have


def _m_age(r, who):
    name, he, his = who
    child = r.choice(["daughter", "son", "niece", "nephew"])
    k, a, b = r.randint(2, 5), r.randint(4, 14), r.randint(2, 12)
    q = f"{name} is {k} times as old as {his} {child}. The {child} is {a} years old. How old will {name} be in {b} years?"
    lines = [f"{name} is {k} * {a} = {k * a} years old.",
             f"In {b} years {he} will be {k * a} + {b} = {k * a + b}."]
    return q, lines, k * a + b


def _m_goal(r, who):
    group = r.choice(["A class", "A sports club", "A youth group", "A choir"])
    item = r.choice(["cans", "books", "coats", "toys", "bottles"])
    a, b = r.randint(40, 200), r.randint(30, 200)
    g = (a + b) + r.randint(10, 150)
    g = 50 * ((g + 49) // 50)
    q = f"{group} collected {a} {item} in the first week and {b} {item} in the second week. Their goal is {g} {item}. How many more {item} do they need?"
    lines = [f"They collected {a} + {b} = {a + b} {item}.",
             f"They need {g} - {a + b} = {g - a - b} more {item}."]
    return q, lines, g - a - b


def _m_bus(r, who):
    vehicle = r.choice(["bus", "tram", "train carriage", "ferry"])
    seats = r.randint(30, 70)
    p = r.randint(10, seats - 12)
    off = r.randint(2, p - 3)
    on = r.randint(2, seats - p + off - 1)
    now = p - off + on
    q = f"A {vehicle} has {seats} seats and {p} passengers, all seated. At the next stop, {off} people get off and {on} people get on and sit down. How many seats are empty now?"
    lines = [f"Now there are {p} - {off} + {on} = {now} passengers.",
             f"There are {seats} - {now} = {seats - now} empty seats."]
    return q, lines, seats - now


def _m_wage(r, who):
    name, he, his = who
    job = r.choice(["in a café", "at a garden centre", "as a lifeguard", "in a bookshop", "at a cinema"])
    a, h, d = r.randint(9, 25), r.randint(3, 8), r.randint(2, 6)
    q = f"{name} works {job} and earns ${a} an hour. {_cap(he)} works {h} hours a day. How much does {he} earn in {d} days?"
    lines = [f"Each day {he} earns {a} * {h} = ${a * h}.",
             f"In {d} days {he} earns {a * h} * {d} = ${a * h * d}."]
    return q, lines, a * h * d


def _m_temperature(r, who):
    town = r.choice(["a mountain village", "a desert town", "a harbour town", "a farming valley"])
    t, u = r.randint(2, 15), r.randint(5, 18)
    f = r.randint(3, t + u - 1)
    q = f"In {town} the temperature was {t} degrees in the morning. By noon it had risen by {u} degrees, and by midnight it had fallen by {f} degrees from the noon temperature. What was the temperature at midnight?"
    lines = [f"At noon it was {t} + {u} = {t + u} degrees.",
             f"At midnight it was {t + u} - {f} = {t + u - f} degrees."]
    return q, lines, t + u - f


def _m_average(r, who):
    name, he, his = who
    game = r.choice(["basketball games", "spelling tests", "bowling rounds", "quiz rounds"])
    a, b = r.randint(10, 40), r.randint(10, 40)
    c = r.randint(10, 40)
    while (a + b + c) % 3:
        c += 1
    q = f"{name} scored {a}, {b} and {c} points in three {game}. What was {his} average score?"
    s = a + b + c
    lines = [f"{_cap(his)} total was {a} + {b} + {c} = {s} points.",
             f"The average is {s} / 3 = {s // 3} points."]
    return q, lines, s // 3


def _m_garden_rows(r, who):
    name, he, his = who
    plant = r.choice(["lettuces", "tulips", "cabbages", "strawberry plants", "sunflowers", "onions"])
    rows, k = r.randint(4, 12), r.randint(6, 20)
    d = r.randint(2, rows * k // 3)
    q = f"{name} plants {rows} rows of {plant} with {k} in each row. {d} of them are eaten by snails. How many {plant} are left?"
    lines = [f"{_cap(he)} planted {rows} * {k} = {rows * k} {plant}.",
             f"There are {rows * k} - {d} = {rows * k - d} {plant} left."]
    return q, lines, rows * k - d


def _m_glasses(r, who):
    drink = r.choice(["lemonade", "orange juice", "iced tea", "apple juice", "milk"])
    g = r.choice([200, 250, 500])
    litres = r.choice({200: [1, 2, 3, 4, 5, 6], 250: [1, 2, 3, 4, 5], 500: [2, 3, 4, 5, 6, 7, 8]}[g])
    ml = litres * 1000
    q = f"A jug holds {litres} litres of {drink}. How many {g}-millilitre glasses can be filled from it?"
    lines = [f"{litres} litres is {litres} * 1000 = {ml} millilitres.",
             f"It fills {ml} / {g} = {ml // g} glasses."]
    return q, lines, ml // g


def _m_share(r, who):
    name, he, his = who
    item = r.choice(["sweets", "cherries", "crayons", "football cards", "biscuits"])
    k, m = r.randint(3, 8), r.randint(4, 15)
    extra = r.randint(2, 12)
    n = k * m + extra
    q = f"{name} has {n} {item}. {_cap(he)} keeps {extra} and shares the rest equally among {k} friends. How many {item} does each friend get?"
    lines = [f"{_cap(he)} shares {n} - {extra} = {n - extra} {item}.",
             f"Each friend gets {n - extra} / {k} = {m} {item}."]
    return q, lines, m


def _m_book(r, who):
    name, he, his = who
    a = r.randint(12, 60)
    n = 3 * a + r.randint(20, 200)
    q = f"A book has {n} pages. {name} read {a} pages on Monday and twice as many pages on Tuesday. How many pages are left to read?"
    lines = [f"On Tuesday {he} read {a} * 2 = {2 * a} pages.",
             f"So far {he} has read {a} + {2 * a} = {3 * a} pages.",
             f"There are {n} - {3 * a} = {n - 3 * a} pages left."]
    return q, lines, n - 3 * a


def _m_walk(r, who):
    name, he, his = who
    place = r.choice(["school", "the library", "work", "the swimming pool"])
    a = 50 * r.randint(6, 30)
    d = r.randint(3, 6)
    q = f"{name} walks {a} metres to {place} and the same distance back home every day. How many metres does {he} walk in {d} days?"
    lines = [f"Each day {he} walks {a} * 2 = {2 * a} metres.",
             f"In {d} days {he} walks {2 * a} * {d} = {2 * a * d} metres."]
    return q, lines, 2 * a * d


def _m_hours(r, who):
    name, he, his = who
    task, tasks = r.choice([("painting", "paintings"), ("cake", "cakes"), ("bird box", "bird boxes"),
                            ("quilt square", "quilt squares"), ("lesson plan", "lesson plans")])
    m = r.choice([12, 15, 20, 30, 40, 45])
    per_hour_unit = 60 // __import__("math").gcd(60, m)
    n = per_hour_unit * r.randint(1, 6)
    if n == 1:
        n = 2 * per_hour_unit
    q = f"{name} needs {m} minutes to make one {task}. How many hours does {he} need to make {n} {tasks}?"
    lines = [f"{_cap(he)} needs {n} * {m} = {n * m} minutes.",
             f"That is {n * m} / 60 = {n * m // 60} hours."]
    return q, lines, n * m // 60


def _m_tickets(r, who):
    event = r.choice(["zoo", "aquarium", "science museum", "water park", "castle"])
    c, a = r.randint(4, 15), r.randint(10, 30)
    if a <= c:
        a = c + 5
    nc, na = r.randint(2, 6), r.randint(2, 4)
    q = f"Tickets to the {event} cost ${c} for a child and ${a} for an adult. How much do {nc} children and {na} adults pay altogether?"
    lines = [f"The children pay {nc} * {c} = ${nc * c}.",
             f"The adults pay {na} * {a} = ${na * a}.",
             f"Altogether they pay {nc * c} + {na * a} = ${nc * c + na * a}."]
    return q, lines, nc * c + na * a


MATH_TEMPLATES = [
    _m_give_buy, _m_packs_left, _m_weeks, _m_two_items, _m_change, _m_groups, _m_fraction_sold, _m_saving,
    _m_speed, _m_half_left, _m_fence, _m_area, _m_times_as_many, _m_discount, _m_tank, _m_age, _m_goal,
    _m_bus, _m_wage, _m_temperature, _m_average, _m_garden_rows, _m_glasses, _m_share, _m_book, _m_walk,
    _m_hours, _m_tickets,
]

_EQUATION = re.compile(r"(\d+(?:\s*[-+*/]\s*\d+)+)\s*=\s*\$?(\d+)")


def check_rationale(text: str) -> int:
    """Recompute every 'a op b ... = c' in a generated rationale and return the final '#### N';
    raises AssertionError when an equation is wrong or N is not the last result."""
    body, final = text.rsplit("\n#### ", 1)
    last = None
    for line in body.split("\n"):
        found = _EQUATION.findall(line)
        assert len(found) == 1, f"expected one equation in {line!r}"
        expr, value = found[0]
        tokens = re.findall(r"\d+|[-+*/]", expr)
        result = eval("".join(f"Fraction({t})" if t.isdigit() else t for t in tokens), {"Fraction": Fraction})  # only digits and operators reach eval
        assert result == Fraction(int(value)), f"{expr} != {value}"
        last = int(value)
    assert final.isdigit() and int(final) == last, f"final answer {final!r} is not the last result {last}"
    return int(final)


def math_rows():
    rng = random.Random(MATH_SEED)
    rows, seen = [], set()
    order = []
    while len(rows) < MATH_COUNT:
        if not order:
            order = list(MATH_TEMPLATES)
            rng.shuffle(order)
        template = order.pop()
        question, lines, answer = template(rng, rng.choice(PEOPLE))
        if question in seen:
            continue
        seen.add(question)
        reference = "\n".join(lines) + f"\n#### {answer}"
        assert check_rationale(reference) == answer and answer >= 0
        rows.append(([question], [reference]))
    return rows
# --------------------------------------------------------------------------- rag (generated)
# Fictional entities with attributes; each row has the passage that answers the question and one
# distractor passage (about a related or an unrelated entity), in random order. The first
# reference appears verbatim in the answering passage and in neither the distractor nor the question.

RAG_SEED = 7321
RAG_COUNT = 89

_PREFIXES = ["Ald", "Bren", "Cor", "Dun", "Elm", "Fen", "Gar", "Hal", "Ise", "Kel", "Lor", "Mar", "Nor", "Ost",
             "Pell", "Quen", "Ros", "Sel", "Tav", "Ulm", "Vel", "Wen", "Yar", "Zan", "Brack", "Cald", "Dray",
             "Farn", "Glen", "Harl", "Jasp", "Lind", "Mel", "Ner", "Orm", "Pim", "Rav", "Stor", "Tor", "Vass"]
_SUFFIXES = ["mere", "ford", "wick", "holt", "by", "stead", "ton", "vale", "moor", "bury", "haven", "dale",
             "wyn", "ric", "ora", "ano", "ella", "ine", "esk", "ark", "oth", "avia", "und", "ley"]
_FIRST = ["Amina", "Bruno", "Carla", "Dmitri", "Esther", "Felix", "Greta", "Hamid", "Ingrid", "Jamal", "Kaia",
          "Lorenzo", "Mireille", "Nils", "Ottilie", "Pavel", "Rania", "Stefan", "Tove", "Ugo", "Valeria",
          "Wilhelm", "Ximena", "Yannick", "Zora", "Ansel", "Beatriz", "Cyrus", "Delphine", "Emeka", "Freya",
          "Gideon", "Hana", "Ivo", "Juno", "Kofi", "Leona", "Marek", "Noor", "Orla"]
_LAST = ["Adler", "Brandt", "Castell", "Dufort", "Eriksen", "Falk", "Greaves", "Holm", "Ibarra", "Janssen",
         "Kowal", "Lindqvist", "Moreau", "Nakamura", "Okonjo", "Petrov", "Quint", "Rask", "Sorensen", "Tamura",
         "Underhill", "Varga", "Whitlock", "Yilmaz", "Zeller", "Achebe", "Barros", "Calder", "Delaney", "Esposito",
         "Fonseca", "Grimaldi", "Haddon", "Iversen", "Jovanovic", "Kerr", "Lucero", "Mbeki", "Novak", "Orsini"]
_NUMBER_WORDS = {3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten",
                 11: "eleven", 12: "twelve"}
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


class _Names:
    """Unique invented place names and person names for one generation run."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.used = rng, set()

    def place(self) -> str:
        while True:
            name = self.rng.choice(_PREFIXES) + self.rng.choice(_SUFFIXES)
            if name not in self.used:
                self.used.add(name)
                return name

    def person(self) -> str:
        while True:
            name = f"{self.rng.choice(_FIRST)} {self.rng.choice(_LAST)}"
            if name not in self.used:
                self.used.add(name)
                return name

    def pick(self, options):
        """A random option, preferring ones not used yet in this run."""
        fresh = [o for o in options if o not in self.used]
        choice = self.rng.choice(fresh or options)
        self.used.add(choice)
        return choice


def _k_lighthouse(r, names):
    a, b = names.place(), names.place()
    year, km, people = r.randint(1820, 1925), r.randint(12, 45), 100 * r.randint(3, 40)
    side = r.choice(["northern", "southern", "eastern", "western"])
    main = f"The {a} Lighthouse stands on the {side} tip of {b} Island. It was built in {year}, and its light can be seen from {km} kilometres away."
    related = f"{b} Island has about {people} inhabitants, most of whom work in fishing or tourism. A ferry connects the island to the mainland {r.choice(['twice a day', 'three times a day', 'once a day'])}."
    qas = [(f"In what year was the {a} Lighthouse built?", [str(year)]),
           (f"From how far away can the light of the {a} Lighthouse be seen?", [f"{km} kilometres", f"{km} km", str(km)]),
           (f"On which island does the {a} Lighthouse stand?", [f"{b} Island", b])]
    return main, related, qas


def _k_river(r, names):
    river, mountains, city = names.place(), names.place(), names.place()
    length, pop = r.randint(120, 980), 1000 * r.randint(40, 600)
    sea = r.choice(["the sea", "Lake " + names.place(), "the ocean"])
    main = f"The river {river} flows {length} kilometres from the {mountains} Mountains to {sea}. Its largest city is {city}."
    related = f"{city} has a population of {pop:,} and is known for its old stone bridges and its university."
    qas = [(f"How long is the river {river}?", [f"{length} kilometres", f"{length} km", str(length)]),
           (f"In which mountains does the river {river} begin?", [f"{mountains} Mountains", mountains]),
           (f"What is the largest city on the river {river}?", [city])]
    return main, related, qas


def _k_company(r, names):
    company = names.place() + r.choice(["tek", " Systems", " Works", "ix"])
    founder, city = names.person(), names.place()
    year = r.randint(1960, 2018)
    product = names.pick(["electric scooters", "hearing aids", "solar water heaters", "kitchen robots",
                          "wooden toys", "weather sensors", "bicycle helmets", "smart door locks", "drones for farmers"])
    main = f"{company} was founded by {founder} in {year}. The company makes {product} and has its headquarters in {city}."
    related = f"{founder} studied engineering before starting a business, and today gives talks to young entrepreneurs."
    qas = [(f"Who founded {company}?", [founder, founder.split()[1]]),
           (f"What does {company} make?", [product]),
           (f"Where does {company} have its headquarters?", [city]),
           (f"In what year was {company} founded?", [str(year)])]
    return main, related, qas


def _k_festival(r, names):
    name, town = names.place(), names.place()
    kind = r.choice(["Lantern Festival", "Harvest Fair", "Kite Festival", "Cheese Fair", "Folk Music Festival"])
    month = r.choice(_MONTHS)
    event = names.pick(["boat race on the river", "giant kite contest", "parade of decorated tractors",
                        "cheese-rolling race", "lantern walk through the old town", "pie-baking contest",
                        "sheepdog trial", "singing competition for choirs"])
    visitors = 1000 * r.randint(3, 80)
    main = f"The {name} {kind} is held every {month} in the town of {town}. Its main event is a {event}."
    related = f"About {visitors:,} visitors come to {town} for the {kind.lower()} each year, and many hotels are fully booked."
    qas = [(f"In which month is the {name} {kind} held?", [month]),
           (f"What is the main event of the {name} {kind}?", [event]),
           (f"In which town is the {name} {kind} held?", [town])]
    return main, related, qas


def _k_dish(r, names):
    town = names.place()
    dish = r.choice(["flatbread", "pie", "loaf", "cake", "tart"])
    ing1, ing2 = r.sample(["chestnut flour", "sour cream", "smoked fish", "goat cheese", "wild garlic",
                           "roasted barley", "pumpkin seeds", "dried plums"], 2)
    side = names.pick(["pickled beetroot", "honey and walnuts", "a bowl of lentil soup", "apple sauce",
                       "fresh herbs and yoghurt", "mushroom gravy", "cold buttermilk"])
    minutes = r.choice([6, 8, 12, 18, 25, 35, 40, 50])
    main = f"To make {town} {dish}, cooks mix {ing1} with {ing2} and bake it for {minutes} minutes. It is usually served with {side}."
    related = f"{town} is a market town famous for its bakeries, several of which have been run by the same families for generations."
    qas = [(f"For how long is {town} {dish} baked?", [f"{minutes} minutes", str(minutes)]),
           (f"What is {town} {dish} usually served with?", [side]),
           (f"What do cooks mix with {ing2} to make {town} {dish}?", [ing1])]
    return main, related, qas


def _k_sport(r, names):
    sport = names.place().lower() + "ball"
    region = names.place()
    n = r.randint(4, 12)
    material = names.pick(["woven reeds", "stuffed leather", "cork", "rubber and wool", "sheepskin", "hemp rope"])
    century = r.choice([15, 16, 17, 18])
    main = f"{_cap(sport)} is played by two teams of {_NUMBER_WORDS[n]} players with a ball made of {material}. It was first played in the villages of {region} in the {century}00s."
    related = f"Today the national {sport} league has {r.randint(8, 20)} clubs, and the final is shown on television every spring."
    qas = [(f"How many players are there in a {sport} team?", [_NUMBER_WORDS[n], str(n)]),
           (f"What is the ball used in {sport} made of?", [material]),
           (f"Where was {sport} first played?", [f"villages of {region}", region])]
    return main, related, qas


def _k_ship(r, names):
    ship = names.pick(["Albatross", "Northern Star", "Kestrel", "Polar Dawn", "Sea Lantern", "Tern", "Aurora",
                       "Meridian Light", "Whale Song", "Compass Rose", "Blue Heron", "Ice Petrel"])
    captain = names.person()
    dest = names.pick(["Antarctica", "the Arctic Ocean", "the Galápagos Islands", "Greenland", "the Sargasso Sea",
                       "South Georgia", "the Bering Strait", "Svalbard"])
    crew, year = r.randint(14, 60), r.randint(1995, 2022)
    main = f"The research ship {ship} carries a crew of {crew}. Captain {captain} commanded the {ship} on its voyage to {dest} in {year}."
    related = f"The {ship} was built in a shipyard in {names.place()} and has a laboratory for studying seawater."
    qas = [(f"Who commanded the {ship} on its voyage to {dest}?", [captain, captain.split()[1]]),
           (f"How many people are in the crew of the {ship}?", [str(crew)]),
           (f"Where did the {ship} sail in {year}?", [dest, dest.removeprefix("the ")]),
           (f"In what year did the {ship} sail to {dest}?", [str(year)])]
    return main, related, qas


def _k_painting(r, names):
    place = names.place()
    title = r.choice([f"Morning at {place} Harbour", f"Snow over {place}", f"The Mill at {place}",
                      f"Evening Market in {place}", f"Fishermen of {place}"])
    painter, year = names.person(), r.randint(1780, 1960)
    scene = names.pick(["boats leaving the harbour at dawn", "a frozen river with skaters", "a water mill in autumn",
                        "market stalls lit by lanterns", "two fishermen mending a net", "a storm over the hills"])
    museum = r.choice([f"National Gallery of {names.place()}", f"{names.place()} Museum of Art"])
    main = f"'{title}' was painted by {painter} in {year}. It shows {scene} and belongs to the {museum}."
    related = f"{painter} taught drawing at an art school for many years and painted mostly landscapes."
    qas = [(f"Who painted '{title}'?", [painter, painter.split()[1]]),
           (f"Which museum owns '{title}'?", [museum]),
           (f"What does the painting '{title}' show?", [scene])]
    return main, related, qas


def _k_bird(r, names):
    bird = names.pick(["copper-tailed finch", "grey-hooded plover", "spotted reed warbler", "long-billed marsh tern",
                       "white-throated swift", "banded rock thrush", "blue-winged teal", "red-capped wren",
                       "golden-eyed heron", "striped sand martin", "black-crowned lark", "olive-backed pipit"])
    place = r.choice([f"Lake {names.place()}", f"the {names.place()} marshes", f"the {names.place()} delta"])
    food = names.pick(["small beetles", "seeds of marsh grasses", "water snails", "flying insects", "tiny shrimps", "berries"])
    habitat = r.choice(["reed beds", "old stone walls", "hollow trees", "sandy river banks"])
    main = f"Every autumn the {bird} flies south to spend the winter at {place}. It feeds mainly on {food}."
    related = f"In spring the {bird} returns north and builds its nest in {habitat}, where it lays up to {_NUMBER_WORDS[r.randint(3, 6)]} eggs."
    qas = [(f"Where does the {bird} spend the winter?", [place, place.removeprefix("the ")]),
           (f"What does the {bird} mainly feed on?", [food])]
    return main, related, qas


def _k_mountain(r, names):
    name, leader = names.place(), names.person()
    height, year, team = r.randint(1800, 5200), r.randint(1850, 1960), r.randint(3, 9)
    main = f"Mount {name} is {height:,} metres high. It was first climbed in {year} by a team of {_NUMBER_WORDS[team]} climbers led by {leader}."
    related = f"The area around Mount {name} is a national park with {r.randint(4, 30)} marked hiking trails and several mountain huts."
    qas = [(f"How tall is Mount {name}?", [f"{height:,} metres", f"{height} metres", f"{height:,}", str(height)]),
           (f"In what year was Mount {name} first climbed?", [str(year)]),
           (f"Who led the first climb of Mount {name}?", [leader, leader.split()[1]])]
    return main, related, qas


def _k_library(r, names):
    town = names.place()
    square = r.choice(["Market Square", "Cathedral Square", "Fountain Square", "Station Square", f"{names.place()} Square"])
    year, books = r.randint(1850, 1990), 1000 * r.randint(15, 300)
    main = f"The {town} Library was founded in {year} and today stands on {square}. It holds about {books:,} books."
    related = f"The library moved to its present building after its old home in {town} became too small."
    qas = [(f"On which square does the {town} Library stand?", [square]),
           (f"In what year was the {town} Library founded?", [str(year)]),
           (f"About how many books does the {town} Library hold?", [f"{books:,}", str(books)])]
    return main, related, qas


def _k_scientist(r, names):
    person, uni, city = names.person(), names.place(), names.place()
    field, invention = names.pick([("chemist", "a cheap water filter made from clay and sand"),
                                   ("engineer", "a bridge sensor that detects cracks early"),
                                   ("biologist", "a test that finds plant diseases in a day"),
                                   ("physicist", "a solar cooker made from recycled metal"),
                                   ("doctor", "a low-cost device for measuring oxygen in the blood"),
                                   ("geologist", "an early warning system for landslides")])
    article = "an" if field[0] in "aeiou" else "a"
    main = f"{person} is {article} {field} who developed {invention}. {person.split()[0]} studied at the University of {uni}."
    related = f"The University of {uni} was founded in {r.randint(1850, 1970)} and is best known for its medical school. It is located in {city}."
    qas = [(f"What did {person} develop?", [invention]),
           (f"Where did {person} study?", [f"University of {uni}", uni]),
           (f"What is {person}'s profession?", [field])]
    return main, related, qas


def _k_bridge(r, names):
    name, river = names.place(), names.place()
    length, year = r.randint(120, 1400), r.randint(1880, 2015)
    main = f"The {name} Bridge crosses the river {river} and is {length} metres long. It opened to traffic in {year}."
    related = f"Before the {name} Bridge was built, people crossed the river {river} by ferry, which took about {r.randint(15, 50)} minutes."
    qas = [(f"When did the {name} Bridge open to traffic?", [str(year)]),
           (f"How long is the {name} Bridge?", [f"{length} metres", str(length)])]
    return main, related, qas


def _k_cafe(r, names):
    name = r.choice(["Blue", "Red", "Green", "Golden", "Silver", "Copper"]) + " " + names.place()
    owner = names.person()
    food = names.pick(["cinnamon rolls", "lemon tarts", "rye pancakes", "plum dumplings", "hazelnut cakes", "cheese scones"])
    job = r.choice(["ship's cook", "bank clerk", "music teacher", "pastry chef in a hotel", "nurse"])
    hour = r.choice([6, 7, 8])
    main = f"The {name} Café opens at {hour} am on weekdays and is famous for its {food}."
    related = f"The café's owner, {owner}, used to work as a {job}."
    qas = [(f"What is the {name} Café famous for?", [food]),
           (f"At what time does the {name} Café open on weekdays?", [f"{hour} am", str(hour)])]
    return main, related, qas


def _k_zoo(r, names):
    animal = r.choice(["red panda", "snow leopard", "tapir", "otter", "giant anteater", "sloth"])
    zoo, origin = names.place(), names.place()
    pet = names.pick(["Pip", "Mosi", "Tindra", "Bramble", "Kiko", "Nuno", "Fennel", "Juniper", "Sable", "Quill"])
    year = r.randint(2005, 2022)
    main = f"The {animal} at {zoo} Zoo is called {pet}. It arrived from a zoo in {origin} in {year}."
    related = f"{zoo} Zoo is open every day except Christmas Day and has about {r.randint(40, 300)} kinds of animals."
    qas = [(f"What is the name of the {animal} at {zoo} Zoo?", [pet]),
           (f"In what year did the {animal} at {zoo} Zoo arrive?", [str(year)])]
    return main, related, qas


def _k_satellite(r, names):
    sat = names.pick(["Lunaris", "Skylark", "Borealis", "Cirrus", "Heliotrope", "Nimbus Blue", "Equinox", "Solstice"])
    thing = names.pick(["the thickness of sea ice", "the saltiness of the oceans", "the moisture in farm soil",
                        "the height of ocean waves", "the amount of dust in the air", "the growth of forests"])
    year, station = r.randint(1998, 2023), names.place()
    main = f"The {sat} satellite was launched in {year}. It measures {thing} and sends its data to a ground station in {station}."
    related = f"Scientists say the data from {sat} helps them understand how the climate is changing."
    qas = [(f"What does the {sat} satellite measure?", [thing, thing.removeprefix("the ")]),
           (f"In what year was the {sat} satellite launched?", [str(year)]),
           (f"Where is the ground station that receives data from {sat}?", [station])]
    return main, related, qas


def _k_cheese(r, names):
    cheese, village = names.place(), names.place()
    milk = r.choice(["sheep's milk", "goat's milk", "cow's milk", "buffalo milk"])
    months = r.randint(2, 30)
    main = f"{cheese} cheese is made from {milk} in the village of {village}. It is aged for {months} months in stone cellars."
    related = f"The village of {village} holds a cheese market every {r.choice(_DAYS)} in summer."
    qas = [(f"What kind of milk is {cheese} cheese made from?", [milk]),
           (f"For how long is {cheese} cheese aged?", [f"{months} months", str(months)]),
           (f"In which village is {cheese} cheese made?", [village])]
    return main, related, qas


def _k_novel(r, names):
    place = names.place()
    title = r.choice([f"The Salt Road to {place}", f"Winter in {place}", f"The Last Ferry from {place}",
                      f"A House in {place}", f"The Clockmaker of {place}"])
    author, year = names.person(), r.randint(1920, 2021)
    plot = names.pick(["a girl who crosses the desert with her grandfather", "two brothers who run a failing hotel",
                       "a clockmaker who can hear the future", "a ferry captain who refuses to retire",
                       "a family that moves to a lighthouse", "a detective who is afraid of the dark"])
    main = f"'{title}' is a novel about {plot}. It was written by {author} and published in {year}."
    related = f"{author} also writes poetry and has taught creative writing at a university."
    qas = [(f"Who wrote '{title}'?", [author, author.split()[1]]),
           (f"In what year was '{title}' published?", [str(year)]),
           (f"What is the novel '{title}' about?", [plot])]
    return main, related, qas


def _k_market(r, names):
    town = names.place()
    day = r.choice(_DAYS)
    where = r.choice(["the old town square", "the harbour car park", "the churchyard", "the main street"])
    century = r.choice(["14th", "15th", "16th", "17th"])
    main = f"In the town of {town} the weekly market is held every {day} in {where}."
    related = f"{town}'s town hall dates from the {century} century and has a clock tower."
    qas = [(f"On which day of the week is {town}'s market held?", [day]),
           (f"Where is the weekly market in {town} held?", [where, where.removeprefix("the ")])]
    return main, related, qas


def _k_lake_swim(r, names):
    lake, swimmer = names.place(), names.person()
    km, hours, minutes = r.randint(5, 30), r.randint(2, 9), r.randint(1, 59)
    main = f"In {r.randint(1990, 2023)}, {swimmer} swam across Lake {lake} in {hours} hours and {minutes} minutes."
    related = f"The water of Lake {lake} is cold even in summer, and the lake is {km} kilometres wide at its widest point."
    qas = [(f"How long did {swimmer} take to swim across Lake {lake}?", [f"{hours} hours and {minutes} minutes", f"{hours} hours {minutes} minutes"])]
    return main, related, qas


RAG_KINDS = [_k_lighthouse, _k_river, _k_company, _k_festival, _k_dish, _k_sport, _k_ship, _k_painting, _k_bird,
             _k_mountain, _k_library, _k_scientist, _k_bridge, _k_cafe, _k_zoo, _k_satellite, _k_cheese, _k_novel,
             _k_market, _k_lake_swim]

RAG_INSTRUCTION = "Answer the question using the passages below."


def _mentions(text: str, phrase: str) -> bool:
    return re.search(r"(?<!\w)" + re.escape(phrase) + r"(?!\w)", text, flags=re.IGNORECASE) is not None


def rag_rows():
    rng = random.Random(RAG_SEED)
    names = _Names(rng)
    rows, seen, order, asked = [], set(), [], {}
    while len(rows) < RAG_COUNT:
        if not order:
            order = list(RAG_KINDS)
            rng.shuffle(order)
        kind = order.pop()
        main, related, qas = kind(rng, names)
        # Ask the kind's questions in turn over the run, so every attribute gets asked.
        index = asked.get(kind, 0) % len(qas)
        asked[kind] = index + 1
        question, refs = qas[index]
        answer = refs[0]
        if rng.random() < 0.5:
            distractor = related
        else:
            other = rng.choice([k for k in RAG_KINDS if k is not kind])
            distractor = other(rng, names)[0]
        if answer not in main or any(_mentions(distractor, ref) or _mentions(question, ref) for ref in refs):
            continue
        passages = [main, distractor] if rng.random() < 0.5 else [distractor, main]
        turn = f"{RAG_INSTRUCTION}\n\nPassage 1: {passages[0]}\n\nPassage 2: {passages[1]}\n\nQuestion: {question}"
        if turn in seen:
            continue
        seen.add(turn)
        rows.append(([turn], list(dict.fromkeys(refs))))
    return rows
# --------------------------------------------------------------------------- translation (hand-written)
# (German sentence, English reference(s)); the first reference is the primary one.
TRANSLATION = [
    ("Ich muss morgen früh zum Zahnarzt, deshalb komme ich später ins Büro.", ["I have to go to the dentist early tomorrow, so I will come to the office later."]),
    ("Der neue Supermarkt in unserer Straße ist bis zehn Uhr abends geöffnet.", ["The new supermarket on our street is open until ten o'clock in the evening."]),
    ("Meine Eltern verbringen ihren Urlaub dieses Jahr an der Ostsee.", ["My parents are spending their holiday on the Baltic Sea this year.", "My parents are spending their vacation at the Baltic Sea this year."]),
    ("Kannst du mir sagen, wie ich zum Bahnhof komme?", ["Can you tell me how to get to the station?", "Can you tell me how I get to the train station?"]),
    ("Das Restaurant war so voll, dass wir eine Stunde auf einen Tisch warten mussten.", ["The restaurant was so full that we had to wait an hour for a table."]),
    ("Unser Nachbar hat uns zu seiner Geburtstagsfeier am Samstag eingeladen.", ["Our neighbour has invited us to his birthday party on Saturday.", "Our neighbor invited us to his birthday party on Saturday."]),
    ("Die Straßenbahn fährt alle zehn Minuten vom Marktplatz ab.", ["The tram leaves from the market square every ten minutes."]),
    ("Ich habe vergessen, die Blumen zu gießen, und jetzt sind sie vertrocknet.", ["I forgot to water the flowers, and now they have dried up."]),
    ("Die Schule bleibt wegen der Renovierung bis Ende August geschlossen.", ["The school will remain closed until the end of August because of the renovation."]),
    ("Mein Bruder möchte nach seinem Studium ein Jahr in Kanada arbeiten.", ["My brother would like to work in Canada for a year after his studies.", "My brother wants to work in Canada for a year after university."]),
    ("Die Preise für Bahnfahrkarten steigen ab Januar um fünf Prozent.", ["Train ticket prices will rise by five percent from January."]),
    ("Wir sollten einen Regenschirm mitnehmen, denn der Himmel ist ganz grau.", ["We should take an umbrella, because the sky is completely grey."]),
    ("Der Arzt hat mir geraten, weniger Zucker zu essen und mehr Sport zu treiben.", ["The doctor advised me to eat less sugar and do more sport.", "The doctor advised me to eat less sugar and exercise more."]),
    ("In dieser Bäckerei gibt es jeden Morgen frische Brötchen.", ["This bakery has fresh rolls every morning."]),
    ("Die Ausstellung über alte Schiffe ist bei Familien sehr beliebt.", ["The exhibition about old ships is very popular with families."]),
    ("Hast du schon gehört, dass Anna ein Baby bekommen hat?", ["Have you heard that Anna has had a baby?"]),
    ("Die Feuerwehr konnte das Feuer nach drei Stunden löschen.", ["The fire brigade was able to put out the fire after three hours.", "The firefighters managed to extinguish the fire after three hours."]),
    ("Ich trinke meinen Kaffee am liebsten ohne Milch und ohne Zucker.", ["I prefer to drink my coffee without milk and without sugar.", "I like my coffee best without milk or sugar."]),
    ("Der Bus war heute Morgen so voll, dass ich stehen musste.", ["The bus was so full this morning that I had to stand."]),
    ("Die Regierung hat angekündigt, mehr Geld in Schulen zu investieren.", ["The government has announced that it will invest more money in schools."]),
    ("Meine Großmutter backt jeden Sonntag einen Apfelkuchen für die ganze Familie.", ["My grandmother bakes an apple cake for the whole family every Sunday."]),
    ("Das Hotel liegt direkt am Strand und hat einen großen Pool.", ["The hotel is right on the beach and has a large pool."]),
    ("Bitte schalten Sie Ihre Mobiltelefone während der Vorstellung aus.", ["Please switch off your mobile phones during the performance.", "Please turn off your cell phones during the show."]),
    ("Nach dem langen Winter freuen sich alle auf den Frühling.", ["After the long winter, everyone is looking forward to spring."]),
    ("Der Computer ist kaputt, deshalb kann ich meine E-Mails nicht lesen.", ["The computer is broken, so I can't read my emails."]),
    ("Die Stadtbibliothek hat am Wochenende jetzt länger geöffnet als früher.", ["The city library is now open longer at the weekend than before."]),
    ("Wir haben uns im Urlaub ein Auto gemietet und die Küste erkundet.", ["We rented a car on holiday and explored the coast."]),
    ("Der Lehrer erklärte die Aufgabe noch einmal, weil niemand sie verstanden hatte.", ["The teacher explained the task again because nobody had understood it."]),
    ("Im Park gegenüber unserer Wohnung spielen am Nachmittag viele Kinder.", ["Many children play in the park opposite our flat in the afternoon."]),
    ("Ich suche eine Wohnung mit zwei Zimmern in der Nähe der Universität.", ["I am looking for a two-room flat near the university.", "I'm looking for a two-room apartment near the university."]),
    ("Das Spiel endete unentschieden, obwohl unsere Mannschaft besser gespielt hat.", ["The game ended in a draw, although our team played better."]),
    ("Am Freitag findet auf dem Rathausplatz ein großer Flohmarkt statt.", ["A large flea market will take place on the town hall square on Friday."]),
    ("Sie lernt seit einem Jahr Spanisch, weil sie nach Mexiko ziehen möchte.", ["She has been learning Spanish for a year because she wants to move to Mexico."]),
    ("Der Kühlschrank ist leer, wir müssen heute noch einkaufen gehen.", ["The fridge is empty; we have to go shopping today."]),
    ("Die Ärzte empfehlen, mindestens acht Stunden pro Nacht zu schlafen.", ["Doctors recommend sleeping at least eight hours a night."]),
    ("Unser Zug hatte einen technischen Defekt und musste auf offener Strecke halten.", ["Our train had a technical fault and had to stop on the open track."]),
    ("Ich habe meinen Regenschirm gestern im Restaurant liegen lassen.", ["I left my umbrella in the restaurant yesterday."]),
    ("Der Film war so spannend, dass ich die ganze Zeit auf der Stuhlkante saß.", ["The film was so exciting that I was on the edge of my seat the whole time."]),
    ("Die Kinder haben im Schnee einen riesigen Schneemann gebaut.", ["The children built a huge snowman in the snow."]),
    ("Kannst du bitte das Fenster schließen? Es ist kalt hier drinnen.", ["Can you please close the window? It is cold in here."]),
    ("Der Marathon führt in diesem Jahr zum ersten Mal durch die Altstadt.", ["This year the marathon goes through the old town for the first time."]),
    ("Wegen der Bauarbeiten ist die Hauptstraße bis Montag gesperrt.", ["Because of the construction work, the main road is closed until Monday."]),
    ("Mein Vater repariert am Wochenende gern alte Fahrräder.", ["My father likes to repair old bicycles at the weekend."]),
    ("Die Studenten protestierten gestern vor dem Rathaus gegen die höheren Studiengebühren.", ["Yesterday the students protested against the higher tuition fees in front of the town hall."]),
    ("Wir treffen uns um halb acht vor dem Kino.", ["We are meeting in front of the cinema at half past seven."]),
    ("Das Wasser im See ist im Juli warm genug zum Schwimmen.", ["The water in the lake is warm enough for swimming in July."]),
    ("Der Chef hat allen Mitarbeitern einen zusätzlichen freien Tag gegeben.", ["The boss gave all employees an extra day off."]),
    ("Ich kann heute Abend nicht kommen, weil ich auf meine kleine Schwester aufpassen muss.", ["I can't come this evening because I have to look after my little sister."]),
    ("Die Katze schläft den ganzen Tag auf dem Sofa im Wohnzimmer.", ["The cat sleeps on the sofa in the living room all day."]),
    ("Im Herbst fallen die Blätter von den Bäumen und der Wind wird kälter.", ["In autumn the leaves fall from the trees and the wind gets colder."]),
    ("Der Flughafen wurde wegen Nebels für mehrere Stunden geschlossen.", ["The airport was closed for several hours because of fog."]),
    ("Wir haben beschlossen, dieses Jahr keine Geschenke zu kaufen, sondern gemeinsam zu verreisen.", ["We have decided not to buy any presents this year but to travel together instead."]),
    ("Die Bauern hoffen nach dem trockenen Sommer auf viel Regen.", ["After the dry summer, the farmers are hoping for a lot of rain."]),
    ("Mein Handy hat keinen Akku mehr, kann ich kurz deins benutzen?", ["My phone's battery is dead; can I use yours for a moment?"]),
    ("Das neue Gesetz soll die Mieten in großen Städten begrenzen.", ["The new law is intended to limit rents in large cities."]),
    ("Der Kellner brachte uns die Speisekarte und ein Glas Wasser.", ["The waiter brought us the menu and a glass of water."]),
    ("Ich fahre jeden Tag mit der U-Bahn zur Arbeit, weil es schneller ist.", ["I take the underground to work every day because it is faster.", "I take the subway to work every day because it's faster."]),
    ("Die Polizei hat den gestohlenen Wagen in einem Wald gefunden.", ["The police found the stolen car in a forest."]),
    ("Wenn du Hilfe brauchst, ruf mich einfach an.", ["If you need help, just call me."]),
    ("Das Museum zeigt eine Sammlung von Gemälden aus dem neunzehnten Jahrhundert.", ["The museum shows a collection of paintings from the nineteenth century."]),
    ("Meine Freundin und ich gehen jeden Dienstag zusammen schwimmen.", ["My friend and I go swimming together every Tuesday."]),
    ("Die Zahl der Touristen in der Stadt hat sich in zehn Jahren verdoppelt.", ["The number of tourists in the city has doubled in ten years."]),
    ("Der Zug nach München fährt heute von Gleis sieben ab.", ["The train to Munich leaves from platform seven today."]),
    ("Nach dem Essen haben wir noch lange auf der Terrasse gesessen und geredet.", ["After dinner we sat on the terrace and talked for a long time."]),
    ("Die Firma sucht einen Ingenieur mit Erfahrung in erneuerbaren Energien.", ["The company is looking for an engineer with experience in renewable energy."]),
    ("Vergiss nicht, deinen Pass mitzunehmen, wenn du ins Ausland reist.", ["Don't forget to take your passport when you travel abroad."]),
    ("Der Arzt sagt, dass mein Bein in sechs Wochen wieder gesund ist.", ["The doctor says that my leg will be healed in six weeks."]),
    ("Die Gemeinde hat beschlossen, im Zentrum mehr Bäume zu pflanzen.", ["The municipality has decided to plant more trees in the centre."]),
    ("Ich habe gestern Abend ein sehr interessantes Buch über Vulkane gelesen.", ["Last night I read a very interesting book about volcanoes."]),
    ("Die Temperaturen sollen am Wochenende auf über dreißig Grad steigen.", ["Temperatures are expected to rise above thirty degrees at the weekend."]),
    ("Unsere Tochter hat gestern ihren ersten Zahn verloren.", ["Our daughter lost her first tooth yesterday."]),
    ("Seit Januar verkauft der Supermarkt keine Plastiktüten mehr.", ["Since January the supermarket has no longer sold plastic bags.", "The supermarket has not sold plastic bags since January."]),
    ("Könnten Sie bitte etwas langsamer sprechen? Ich verstehe nicht alles.", ["Could you please speak a little more slowly? I don't understand everything."]),
    ("Das Orchester spielt heute Abend Werke von Mozart und Beethoven.", ["The orchestra is playing works by Mozart and Beethoven this evening."]),
    ("Viele junge Leute können sich eine Wohnung in der Innenstadt nicht leisten.", ["Many young people cannot afford a flat in the city centre."]),
    ("Wir müssen das Auto in die Werkstatt bringen, die Bremsen quietschen.", ["We have to take the car to the garage; the brakes are squeaking."]),
    ("Der Wetterbericht sagt für morgen Sturm und starken Regen voraus.", ["The weather forecast predicts a storm and heavy rain for tomorrow."]),
    ("Mein Onkel hat sein ganzes Leben auf einem Bauernhof gearbeitet.", ["My uncle worked on a farm his whole life."]),
    ("Die Ferien beginnen nächste Woche, und die Kinder sind schon sehr aufgeregt.", ["The holidays start next week, and the children are already very excited."]),
    ("Ich habe den Schlüssel unter die Fußmatte gelegt.", ["I put the key under the doormat."]),
    ("Der Präsident wird nächste Woche drei Länder in Südamerika besuchen.", ["The president will visit three countries in South America next week."]),
    ("Die Äpfel aus unserem Garten schmecken viel besser als die aus dem Laden.", ["The apples from our garden taste much better than the ones from the shop."]),
    ("Es hat die ganze Nacht geschneit, und die Straßen sind glatt.", ["It snowed all night, and the roads are slippery."]),
    ("Sie arbeitet als Übersetzerin und spricht fünf Sprachen fließend.", ["She works as a translator and speaks five languages fluently."]),
    ("Das Theater hat ein neues Stück über das Leben eines Fischers aufgeführt.", ["The theatre staged a new play about the life of a fisherman."]),
    ("Unser Hund bellt jedes Mal, wenn der Briefträger kommt.", ["Our dog barks every time the postman comes."]),
]
# --------------------------------------------------------------------------- summarization (hand-written)
# (passage, one-sentence reference summary); the turn is "Summarize: " + passage.
SUMMARIZATION = [
    ("The village of Thornby has opened its first community shop since the last grocery store closed three years ago. More than 200 residents bought shares to raise the 80,000 dollars needed to rent and stock the building. The shop sells bread, milk, fresh vegetables from local farms and newspapers. It is run by one paid manager and a rota of about 40 volunteers. Older residents say they no longer need to take a bus to the next town for basic shopping.",
     "Thornby has opened a community shop funded by more than 200 residents and run mostly by volunteers, three years after its last grocery store closed."),
    ("A lost wedding ring was returned to its owner in Greywater after it was found inside a fish. Fisherman Paul Mercer discovered the gold ring while cleaning a large cod he had caught off the coast. The ring was engraved with two names and a date, which Mercer shared on social media. Within a day, a woman named Helen Ford recognised it as the ring her husband had dropped from a ferry six months earlier. The couple met Mercer on Friday to collect it.",
     "A fisherman in Greywater found a gold wedding ring inside a cod and returned it to the couple who had lost it from a ferry six months earlier."),
    ("The city of Larkfield will ban cars from its main shopping street from the first of May. The council said the change will reduce pollution and make the street safer for pedestrians. Delivery vans will still be allowed before ten in the morning. Some shop owners fear they will lose customers who arrive by car, but the council plans to open a new car park nearby. The scheme will be reviewed after one year.",
     "Larkfield will ban cars from its main shopping street from May to cut pollution and improve safety, allowing deliveries only before ten in the morning."),
    ("A primary school in Oakmere has started a weekly lesson in which pupils grow their own vegetables. Each class looks after a raised bed in the school garden and chooses what to plant. The vegetables are used in the school kitchen, and extra produce is sold to parents on Fridays. Teachers say the children are now more willing to try new foods. The money from sales pays for seeds and tools.",
     "Pupils at an Oakmere primary school now grow vegetables in weekly garden lessons, and the produce is used in the school kitchen or sold to parents."),
    ("Archaeologists digging near the town of Hexley have found the remains of a Roman bath house. The building had at least three heated rooms and a cold plunge pool. Coins found at the site suggest it was used in the second century. The dig began after workers preparing land for new houses uncovered old stone walls. The builders have agreed to move the houses so that the site can be preserved.",
     "Archaeologists have uncovered a second-century Roman bath house near Hexley on land meant for new houses, which will be moved to preserve the site."),
    ("Nurses at Saint Mary's Hospital in Crestwood will go on strike for two days next week in a dispute over pay and staffing. Their union says wards are often short of staff and nurses are working unpaid overtime. The hospital said emergency care will continue as normal, but some planned operations will be postponed. Talks between the union and hospital managers broke down on Monday. Both sides say they are willing to meet again.",
     "Nurses at Crestwood's Saint Mary's Hospital will strike for two days next week over pay and staffing, and some planned operations will be postponed."),
    ("A woman from Penrose has completed a walk around the entire coastline of the country. Grace Holloway set off fourteen months ago and covered more than 4,000 kilometres. She slept in a tent most nights and was often joined by local walkers for parts of the route. Along the way she raised 60,000 dollars for a mental health charity. She said the hardest part was walking through winter storms in the north.",
     "Grace Holloway from Penrose finished a 4,000-kilometre walk around the country's coastline after fourteen months, raising 60,000 dollars for a mental health charity."),
    ("Drivers in Redcliff will have to pay to park in the town centre for the first time from next month. The charge will be one dollar per hour between nine in the morning and six in the evening. The council says the money will be used to repair roads and pavements. Residents with a permit will still park for free in their own streets. Local traders have started a petition against the plan.",
     "Redcliff will start charging one dollar an hour for town-centre parking next month to pay for road repairs, though residents with permits will park free."),
    ("Heavy rain caused the river Wend to burst its banks on Wednesday, flooding around 150 homes in the town of Millbrook. Emergency services used boats to rescue people from houses on the lowest streets. A sports hall was opened as a shelter, and about 80 people spent the night there. The water started to fall on Thursday afternoon. Officials warned that clean-up work could take several weeks.",
     "The river Wend flooded around 150 homes in Millbrook after heavy rain, forcing boat rescues and leaving about 80 people in a shelter overnight."),
    ("A teenager from Ashgrove has won a national science prize for a device that warns farmers when their soil is too dry. Sixteen-year-old Omar Haddad built the sensor from cheap parts and connected it to a mobile phone app. He tested it for a year on his uncle's farm. The prize includes 5,000 dollars and a visit to a university research lab. Omar says he wants to make the device available to small farms.",
     "Sixteen-year-old Omar Haddad from Ashgrove won a national science prize for a cheap sensor that alerts farmers by phone when their soil is too dry."),
    ("The historic Grand Hotel in Seabrook reopened on Saturday after a three-year restoration. The building, which opened in 1890, had been empty since its previous owner went bankrupt. Workers repaired the roof, restored the painted ceilings and installed modern heating. The hotel now has 85 rooms and a restaurant overlooking the bay. Around 60 local people have been hired to work there.",
     "Seabrook's Grand Hotel, built in 1890, reopened after a three-year restoration with 85 rooms, creating around 60 local jobs."),
    ("Residents of Kilburn Heath are being asked to use less water after the driest spring in 30 years. Reservoir levels have fallen to just over half of their normal level. The water company has banned the use of garden hoses until further notice. People who break the ban could be fined. The company also said it is fixing leaks in its pipes faster than before.",
     "After the driest spring in 30 years, Kilburn Heath residents face a garden hose ban as reservoir levels fall to just over half of normal."),
    ("A new footbridge linking the two halves of the town of Dalby opened on Monday. Before the bridge was built, people on foot had to walk two kilometres to cross the river at the road bridge. The footbridge is 90 metres long and has lights powered by solar panels. It cost four million dollars, paid for by the regional government. Hundreds of people walked across it on the first day.",
     "A 90-metre solar-lit footbridge opened in Dalby, sparing pedestrians a two-kilometre walk to cross the river."),
    ("Police in Fernhill have returned a stolen painting to a local art gallery after it was found in a garage. The small landscape, worth about 50,000 dollars, was taken during a break-in last November. Officers found it after a tip from a member of the public. Two men have been arrested. The gallery said the painting was undamaged and will go back on display next week.",
     "Police found a landscape painting stolen from a Fernhill gallery last November in a garage, arrested two men and returned the undamaged work."),
    ("A family of foxes has been living under the stage of the open-air theatre in Lindale Park. The park's staff first noticed the animals in April, when four cubs were seen playing on the lawn. Performances have continued, and the foxes seem unbothered by the music. Staff have put up signs asking visitors not to feed them. Wildlife experts say the cubs will leave in the autumn.",
     "A family of foxes has settled under the stage of the open-air theatre in Lindale Park, and staff have asked visitors not to feed them."),
    ("The ferry company serving the Moray Islands has added a second daily crossing for the summer. Demand has grown because of a rise in tourists visiting the islands' beaches and bird colonies. The extra ferry will leave the mainland at four in the afternoon from June until September. Island residents will continue to receive a discount on tickets. The company said it may keep the second crossing all year if it is popular.",
     "The Moray Islands ferry company will add a second daily summer crossing from June to September because of rising tourist demand."),
    ("A 92-year-old man from Birchwood has graduated from university with a degree in history. Arthur Bell left school at fourteen to work in a factory and always regretted not continuing his education. He began studying part-time at the age of 86 and wrote his final essay on the history of his home town. His great-grandchildren attended the ceremony. He says he now plans to learn Italian.",
     "Arthur Bell, 92, from Birchwood has earned a history degree after starting part-time studies at 86, having left school at fourteen."),
    ("The town of Eldon has introduced a free minibus service for people over seventy. The bus runs three times a week and takes passengers from their homes to the shops, the health centre and the library. Drivers are volunteers, and the fuel is paid for by a local charity. Organisers say many older people in outlying villages were struggling to get around since a regular bus route was cut. Passengers can book a seat by phone.",
     "Eldon has launched a free volunteer-run minibus three times a week to take people over seventy to shops, the health centre and the library."),
    ("A large sinkhole appeared in a car park in Bramford on Tuesday night, swallowing two parked cars. Nobody was hurt because the car park was nearly empty at the time. Engineers believe an old mine tunnel under the site collapsed after heavy rain. The car park will remain closed while experts check the ground. The owners of the cars have been told they may not be able to recover them.",
     "A sinkhole in a Bramford car park swallowed two cars on Tuesday night, probably after an old mine tunnel collapsed, but nobody was hurt."),
    ("Farmers in the Ambervale valley expect a record apple harvest this year after a warm spring and plenty of summer rain. Some orchards are reporting twice as much fruit as last year. However, growers are worried about finding enough workers to pick the apples in time. Several farms have asked students and retired people to help during the autumn. Prices in shops are expected to fall slightly.",
     "Ambervale valley farmers expect a record apple harvest after good weather but fear a shortage of pickers, while shop prices may fall slightly."),
    ("The football club Riverside United has announced that its stadium will be renamed after a former player. Jimmy Cole scored more than 200 goals for the club in the 1970s and later worked as its youth coach for 25 years. He died last year at the age of 78. The club said fans had voted overwhelmingly for the new name. A statue of Cole will also be placed outside the main entrance.",
     "Riverside United will rename its stadium after Jimmy Cole, a former player and youth coach who died last year, following a fan vote."),
    ("Scientists at the University of Westmarch have developed a paint that keeps buildings cooler in hot weather. The white paint reflects almost all sunlight and releases heat into the sky. In tests, walls covered with it stayed up to eight degrees cooler than walls with ordinary paint. The researchers say the paint could reduce the need for air conditioning. A company plans to start selling it next year.",
     "University of Westmarch scientists have created a reflective white paint that kept walls up to eight degrees cooler in tests and may go on sale next year."),
    ("The annual balloon festival in Hartwell was cancelled on its first day because of strong winds. More than 40 hot-air balloons from several countries had been due to take off at dawn. Organisers said the safety of the pilots and the public came first. The festival's markets and concerts continued on the ground. Organisers hope the balloons can fly on Sunday if the weather improves.",
     "Strong winds stopped more than 40 hot-air balloons from flying on the first day of the Hartwell balloon festival, though ground events went ahead."),
    ("A cat that disappeared from its home in Mossley has been found 300 kilometres away. The ginger cat, called Marmalade, was taken to a vet in a coastal town after a resident noticed it was hungry. The vet scanned its microchip and contacted the owners. They believe the cat climbed into a removal van parked on their street two months ago. The family drove to the coast to bring it home.",
     "Marmalade, a ginger cat missing from Mossley for two months, was found 300 kilometres away and identified by its microchip, probably after riding in a removal van."),
    ("The city of Northam is planting 10,000 trees over the next five years to cool its streets during summer heatwaves. The trees will be planted mainly in neighbourhoods with few parks. Residents can ask for a tree to be planted outside their home through the council's website. Each tree will be watered by council staff for its first three years. The plan will cost about two million dollars.",
     "Northam will plant 10,000 trees over five years, mainly in neighbourhoods with few parks, to cool its streets during heatwaves."),
    ("Two climbers were rescued from a ledge on Craig Dubh mountain after being trapped overnight by thick fog. The men, both in their twenties, lost the path on their way down and called for help on Saturday evening. A rescue team reached them at first light on Sunday. Both were cold but uninjured. The rescue team reminded walkers to check the weather forecast and carry a map.",
     "Two climbers trapped overnight by fog on Craig Dubh mountain were rescued unhurt by a mountain rescue team on Sunday morning."),
    ("Shoppers in Wellsby will be able to return empty bottles and cans for a refund from next spring. Machines will be placed in supermarkets, and each container will earn ten cents. The scheme aims to reduce litter and increase recycling. Similar schemes in other countries have led to more than 90 percent of bottles being returned. Shops will receive a fee for handling the containers.",
     "From next spring, Wellsby shoppers will get ten cents back for each bottle or can returned to supermarket machines, under a scheme to cut litter and boost recycling."),
    ("An old steam locomotive has returned to service on the Kelmoor heritage railway after ten years of repairs. Volunteers rebuilt its boiler and replaced hundreds of parts. The engine, built in 1924, will pull passenger trains on weekends during the summer. The railway expects the locomotive to attract many visitors. Tickets for the first trips sold out within a day.",
     "A 1924 steam locomotive restored by volunteers over ten years is back in service on the Kelmoor heritage railway, and its first trips sold out in a day."),
    ("The town of Brightwater has held its first festival of board games. More than 2,000 people attended the two-day event in the town hall. Visitors could try hundreds of games, from chess to new card games made by local designers. A tournament for children attracted 150 players. Organisers say they plan to make the festival an annual event.",
     "More than 2,000 people attended Brightwater's first two-day board game festival, which organisers now plan to hold every year."),
    ("A factory in Coldharbour will start making bicycles again after a gap of 40 years. The building once employed more than 1,000 workers making bikes but closed in the 1980s. A new company has bought the site and plans to produce electric bicycles. It expects to employ about 200 people within three years. The first bikes should be ready by next summer.",
     "A new company will make electric bicycles at a former bicycle factory in Coldharbour, 40 years after it closed, and expects to employ about 200 people."),
    ("The public swimming pool in Stanmore has closed after a fault was found in its roof. Inspectors said some of the roof beams had been weakened by damp. The pool will stay closed for at least six months while repairs are carried out. Swimming clubs and school lessons will move to a pool in a neighbouring town. The council will provide a free bus for pupils.",
     "Stanmore's swimming pool has closed for at least six months to repair damp-weakened roof beams, and school lessons will move to a neighbouring town."),
    ("Astronomers at the Highcrest Observatory have spotted a comet that may become visible to the naked eye in December. The comet was first seen as a faint smudge on images taken in August. Its brightness will depend on how it reacts as it approaches the Sun. If it survives, it should be seen low in the western sky after sunset. The observatory will hold public viewing evenings.",
     "Highcrest Observatory astronomers have found a comet that could be visible to the naked eye in the western sky in December."),
    ("Volunteers collected almost two tonnes of rubbish from the beaches of Saltmarsh Bay on Sunday. More than 300 people took part in the clean-up, which is held every year. Most of the rubbish was plastic, including bottles, fishing nets and food packaging. The waste was sorted so that as much as possible could be recycled. Organisers thanked local businesses for providing gloves and bags.",
     "More than 300 volunteers collected almost two tonnes of mostly plastic rubbish from Saltmarsh Bay's beaches in the annual clean-up."),
    ("A restaurant in Tilbury Cross has been named the best in the region by a popular food guide. The Copper Pot, run by chef Nadia Rahman, serves dishes made with vegetables from its own garden. Rahman opened the restaurant five years ago after working in kitchens abroad. The guide praised its fish soup and homemade bread. Bookings have increased sharply since the award was announced.",
     "Nadia Rahman's Copper Pot in Tilbury Cross, known for using its own garden vegetables, was named the region's best restaurant by a food guide."),
    ("The government has announced that the national park at Wildmoor will be expanded by 20 percent. The new area includes ancient woodland and a lake used by migrating birds. Farming will continue on the land, but new buildings will need special permission. Environmental groups welcomed the decision. Some landowners said they had not been properly consulted.",
     "The Wildmoor national park will grow by 20 percent to include ancient woodland and a lake used by migrating birds."),
    ("A power cut left most of the city of Granton without electricity for five hours on Thursday. Traffic lights stopped working, causing long queues on the main roads. The power company said a fire at a substation caused the problem. Hospitals used backup generators and were not affected. Power was restored to all homes by the evening.",
     "A substation fire cut power to most of Granton for five hours on Thursday, knocking out traffic lights, though hospitals ran on generators."),
    ("Pupils at Hillside Secondary School have raised money to build a well in a village abroad. Over six months, they organised bake sales, a sponsored run and a concert. They collected 12,000 dollars, enough to pay for the well and a water pump. A charity will carry out the work next spring. The school plans to keep in touch with the village through video calls.",
     "Hillside Secondary School pupils raised 12,000 dollars through bake sales, a run and a concert to pay for a well and pump in a village abroad."),
    ("A rare white deer has been seen several times in the forest near Ravensworth. Local photographer Tom Hale took pictures of the animal last week. Experts say the deer's pale coat is caused by a rare genetic condition. Forest rangers have asked visitors to keep their distance and not to share its exact location. Such deer are seen only a few times each decade in the region.",
     "A rare white deer has been photographed near Ravensworth, and rangers have asked visitors to keep their distance and not share its location."),
    ("The city council of Dunport has approved plans for a new tram line to the airport. The line will be 14 kilometres long and will have nine stops. Construction is expected to start next year and take about four years. Trams will run every ten minutes during the day. Supporters say it will reduce traffic on the busy airport road.",
     "Dunport's council approved a 14-kilometre tram line with nine stops to the airport, due to take about four years to build."),
    ("A hospital in Lowfield has started using a robot to deliver medicines between wards. The robot travels along corridors and uses lifts on its own. Nurses say it saves them many trips to the pharmacy each day. The robot can carry up to 20 kilograms and stops when a person steps in front of it. The hospital may buy two more if the trial goes well.",
     "Lowfield hospital is trialling a robot that delivers medicines between wards on its own, saving nurses trips to the pharmacy."),
    ("Cyclists in Harrowgate now have a new 25-kilometre path that follows an old canal. The route was built on the former towpath and passes through three villages. Benches and information boards about the canal's history have been added along the way. The path is also open to walkers and wheelchair users. The project took two years and was paid for by a national fund.",
     "A 25-kilometre cycling and walking path along an old canal towpath has opened in Harrowgate, passing through three villages."),
    ("An 11-year-old boy from Weston Green has found a fossil of an ancient sea creature on a beach. Leo Marsh was looking for shells with his mother when he noticed a spiral shape in a rock. Experts at the local museum identified it as an ammonite about 180 million years old. Leo has agreed to lend the fossil to the museum for an exhibition. He says he wants to become a palaeontologist.",
     "Eleven-year-old Leo Marsh found a 180-million-year-old ammonite fossil on a beach near Weston Green and will lend it to the local museum."),
    ("The cost of a cinema ticket in Farley has dropped to five dollars on Tuesdays in an effort to attract more viewers. The Royal Cinema says attendance has fallen since many people began watching films at home. The offer applies to all films and all seats. The cinema has also started showing older classic films on Sunday afternoons. The manager said early results are encouraging.",
     "Farley's Royal Cinema has cut Tuesday tickets to five dollars and added Sunday classic films to win back viewers."),
    ("A group of residents in Stonebridge has turned an empty shop into a repair café. Once a month, volunteers fix broken toasters, lamps, clothes and bicycles free of charge. Visitors are asked to watch and learn how to do the repairs themselves. Organisers say they fixed more than 70 items at the first event. The aim is to reduce the number of things thrown away.",
     "Stonebridge residents have opened a monthly repair café where volunteers fix broken items for free, mending more than 70 at the first event."),
    ("Workers at the port of Eastmouth discovered a young seal sleeping on a pile of ropes on Monday morning. The seal appeared to be healthy but was far from the water. Staff called a marine rescue charity, which moved the animal back to the sea. The charity said young seals often rest on land and should be left alone unless they are injured. Port workers nicknamed the seal Rusty.",
     "A young seal found asleep on ropes at Eastmouth port was returned to the sea by a marine rescue charity."),
    ("The regional government has promised to repair 500 kilometres of rural roads over the next three years. Many country roads are full of potholes after several hard winters. Farmers and bus companies have complained about damage to their vehicles. The work will cost around 300 million dollars. Roads near schools and hospitals will be repaired first.",
     "The regional government will spend around 300 million dollars over three years to repair 500 kilometres of pothole-damaged rural roads, starting near schools and hospitals."),
    ("A choir made up of hospital staff in Queensbury has released a song to raise money for patients' families. The 30 doctors, nurses and cleaners rehearsed during their lunch breaks for three months. The song was recorded in the hospital chapel. In its first week, it raised more than 15,000 dollars. The money will help families pay for travel and accommodation while visiting patients.",
     "A Queensbury hospital staff choir released a song that raised more than 15,000 dollars in a week to help patients' families with travel and accommodation."),
    ("Thick fog caused the cancellation of dozens of flights at Portwell Airport on Friday morning. Thousands of passengers were left waiting in the terminal. Some flights were diverted to other airports. The fog began to clear around noon, and flights slowly restarted. The airport advised passengers to check with their airlines before travelling.",
     "Thick fog forced the cancellation of dozens of flights at Portwell Airport on Friday morning until it cleared around noon."),
    ("The zoo in Kingsbridge has welcomed the birth of twin red pandas. The cubs were born in June but spent their first weeks in a nest box with their mother. Keepers say both are healthy and have started exploring their enclosure. Red pandas are endangered in the wild, and the zoo is part of a breeding programme. The public will be invited to suggest names.",
     "Kingsbridge zoo has announced the birth of healthy twin red pandas, an endangered species, as part of a breeding programme."),
    ("A new law will require all new houses in the country to have solar panels from 2027. The government says the rule will help cut energy bills and reduce carbon emissions. Builders say it will add several thousand dollars to the price of a house. Homes built in shaded areas may be exempt. The law was passed by parliament on Wednesday.",
     "A law passed on Wednesday will require all new houses to have solar panels from 2027 to cut energy bills and emissions."),
    ("The small island of Inchmore has its first doctor's surgery in decades. Until now, the island's 400 residents had to take a boat to the mainland to see a doctor. A doctor and a nurse will work on the island three days a week. On other days, patients can speak to a doctor by video call. Residents celebrated the opening with a party at the harbour.",
     "Inchmore's 400 residents now have a doctor's surgery on the island three days a week, ending the need to take a boat to the mainland."),
    ("Thieves stole around 600 kilograms of honey from a beekeeper near Ashby Cross last weekend. The honey was in buckets stored in a shed, ready to be sold at markets. Beekeeper Ruth Lowe said the loss is worth around 9,000 dollars. Police are asking anyone who is offered large amounts of cheap honey to contact them. Lowe said she will install cameras at the shed.",
     "Thieves stole about 600 kilograms of honey worth around 9,000 dollars from a beekeeper's shed near Ashby Cross."),
    ("A library in Marston has started lending tools as well as books. Members can borrow drills, ladders, sewing machines and garden equipment for up to a week. The tools were donated by residents and a local hardware store. Librarians say the service helps people save money and reduces waste. More than 100 tools were borrowed in the first month.",
     "Marston's library now lends donated tools such as drills and ladders, and more than 100 were borrowed in the first month."),
    ("A storm damaged the roof of the 600-year-old church of Saint Anne in Wexcombe on Sunday night. Strong winds tore off several sections of lead, and rain entered the building. Volunteers moved old books and paintings to a safe place. The church has launched an appeal to raise 200,000 dollars for repairs. Services will be held in the village hall until the roof is fixed.",
     "A storm tore lead from the roof of Wexcombe's 600-year-old Saint Anne church, which is appealing for 200,000 dollars for repairs."),
    ("A farmer in Hollins Vale has cut a maze into his maize field to attract visitors. The maze covers four hectares and has paths shaped like a giant tractor when seen from above. It took two weeks to cut the paths. Visitors pay eight dollars to enter, and part of the money goes to a local school. The maze will be open until the crop is harvested in September.",
     "A Hollins Vale farmer has cut a tractor-shaped maze into a four-hectare maize field, open to paying visitors until September."),
    ("Engineers have finished a new sea wall to protect the village of Carrick Point from storms. The old wall was badly damaged by waves two winters ago, and several houses were flooded. The new wall is two metres higher and made of concrete and large rocks. It cost about 11 million dollars. Residents said they feel much safer now.",
     "A new sea wall two metres higher than the damaged old one has been completed at Carrick Point at a cost of about 11 million dollars."),
    ("A runner from Glenrock has set a national record for the fastest 100 kilometres. Sofia Marin finished the race in seven hours and 12 minutes, beating the previous record by nine minutes. She trains by running to and from her job as a teacher. Marin said she was surprised by the result because she had a cold the week before. She now hopes to compete at the world championships.",
     "Glenrock teacher Sofia Marin set a national 100-kilometre record of seven hours and 12 minutes, nine minutes faster than the previous best."),
    ("The mayor of Pembridge has announced that the town's Christmas lights will be switched on by a local nurse this year. The nurse, Janet Okoro, was chosen by residents for her 30 years of work at the town's health centre. The ceremony will take place on the first Saturday of December. A brass band and a choir will perform. Stalls will sell food and crafts in the market square.",
     "Nurse Janet Okoro, chosen by residents for 30 years of work at the health centre, will switch on Pembridge's Christmas lights in December."),
    ("A cargo ship carrying cars ran aground near the port of Halsey on Tuesday. The ship hit a sandbank while entering the harbour in strong winds. None of the 22 crew members were injured. Tugboats tried to free the ship at high tide but failed. Experts will attempt another rescue operation at the weekend.",
     "A car-carrying cargo ship ran aground on a sandbank near Halsey port in strong winds, and its 22 crew were unharmed."),
    ("Bakers in the city of Orlen have started a programme to give unsold bread to homeless shelters. Every evening, volunteers collect the leftover loaves from 25 bakeries. The bread is delivered to four shelters and a food bank. Organisers say around 400 loaves are saved from the bin each week. More bakeries have asked to join the scheme.",
     "Volunteers in Orlen collect unsold bread from 25 bakeries each evening for shelters and a food bank, saving around 400 loaves a week."),
    ("A town in the north has recorded its coldest night in 50 years. The temperature in Frostmere fell to minus 31 degrees Celsius early on Wednesday. Schools opened two hours late, and some buses did not run because their engines would not start. Many people stayed at home to keep warm. Forecasters say milder weather will arrive at the weekend.",
     "Frostmere had its coldest night in 50 years at minus 31 degrees Celsius, delaying schools and stopping some buses."),
    ("A group of students at Calder University has designed a small satellite that will be launched next year. The satellite, about the size of a shoebox, will take pictures of forests to measure how much they are growing. The students built it over three years with help from an engineering company. It will be carried into space by a commercial rocket. The university says it is the first satellite made by its students.",
     "Calder University students have built a shoebox-sized satellite to photograph forest growth, which will be launched next year on a commercial rocket."),
    ("An old lighthouse on Gannet Head has been turned into a holiday home. The lighthouse stopped working in 1995 and was sold by the coastguard last year. The new owners spent two years restoring it and kept its original spiral staircase. Guests can sleep in the round room at the top and watch ships pass. Bookings are already full for the summer.",
     "The disused Gannet Head lighthouse has been restored as a holiday home, and it is fully booked for the summer."),
    ("The town of Merrow has banned fireworks in its parks after complaints from dog owners and farmers. Animals are often frightened by the loud bangs, and some have run away. The town will instead hold a light show with lasers and music on New Year's Eve. Some residents said they will miss the fireworks. The ban will be reviewed next year.",
     "Merrow has banned fireworks in its parks after complaints about frightened animals and will hold a laser light show on New Year's Eve instead."),
    ("A new bakery run by people with learning disabilities has opened in Kelso Bridge. The bakery trains workers in baking, serving customers and handling money. It was set up by a charity with help from a local business owner. Its cinnamon rolls have already become popular. The charity hopes the workers will later find jobs in other cafés and shops.",
     "A charity bakery in Kelso Bridge trains people with learning disabilities in baking and customer service, hoping they will later find other jobs."),
    ("Heavy traffic on the coast road to Port Aven has led the council to plan a new bypass. In summer, the two-lane road through the town centre is often blocked by visitors' cars. The bypass would run for six kilometres around the town. Residents will be able to comment on the route at public meetings next month. Work could start in three years if the plan is approved.",
     "The council plans a six-kilometre bypass around Port Aven to ease summer traffic jams, and residents can comment on the route next month."),
    ("A man in Ebbwick has returned a library book 47 years after borrowing it. Peter Gale found the book about birds while clearing out his late mother's attic. He brought it back with a letter of apology and a donation of 100 dollars. Library staff said the fine would have been far higher, but they were happy to see the book again. It will be displayed in a glass case.",
     "Peter Gale returned a bird book to Ebbwick library 47 years late, after finding it in his late mother's attic, with an apology and a 100-dollar donation."),
    ("Parents in Highbury have complained about a plan to close the town's only nursery. The owners say the building needs repairs they cannot afford. About 60 children attend the nursery, and parents say there are no other places nearby. The council has offered to help find a new building. A decision is expected by the end of the month.",
     "Parents in Highbury are protesting the planned closure of the town's only nursery, which 60 children attend, while the council looks for a new building."),
    ("A team of volunteers has counted the butterflies in Redwood Meadow for the 20th year in a row. This year they recorded 23 species, two more than last year. The number of common blue butterflies was the highest since counting began. Volunteers believe a new mowing schedule, which lets wildflowers grow longer, has helped. The results will be shared with a national wildlife survey.",
     "Volunteers counting butterflies in Redwood Meadow for the 20th year recorded 23 species, helped by later mowing that lets wildflowers grow."),
    ("The cable car in the ski resort of Alpenfeld was stopped for three hours on Saturday after a technical fault. About 60 people were stuck in cabins above the valley. Rescue teams brought some of them down using ropes. The fault was later repaired, and no one was injured. The company that runs the cable car has apologised and will refund tickets.",
     "A technical fault stopped Alpenfeld's cable car for three hours, trapping about 60 people, some of whom were brought down by rope without injury."),
    ("A school in Lanford has switched to a four-day week for older pupils as part of a trial. Lessons are longer from Monday to Thursday, and Fridays are used for sports, clubs and private study. The head teacher says pupils are more rested and attendance has improved. Some parents have found it hard to arrange childcare on Fridays. The trial will last for one school year.",
     "A Lanford school is trialling a four-day week for older pupils for one year, with longer lessons and Fridays for sport, clubs and study."),
    ("Residents in Eastbrook are invited to help name a new street in the town. The street is part of a housing development with 120 homes. The council has shortlisted three names, each linked to a figure from the town's history. Voting is open online and at the library until the end of the month. The winning name will be announced in the local newspaper.",
     "Eastbrook residents can vote until the end of the month to choose one of three historical names for a new street in a 120-home development."),
    ("Fishermen in Port Calloway say they are catching fewer crabs than ever before. Some boats are landing only half of what they caught five years ago. Scientists are studying whether warmer water or disease is to blame. The fishing association has asked the government for financial help. Some fishermen have started taking tourists on boat trips to earn extra money.",
     "Port Calloway fishermen are catching far fewer crabs than five years ago and have asked for government help while scientists look for the cause."),
    ("A cinema in Woodbury has installed special seats that move and vibrate in time with the action on screen. The seats also spray water and blow air during some scenes. Tickets for the new seats cost three dollars more than regular ones. The cinema says the seats are especially popular with teenagers. Every screening with the new seats has sold out since they were installed.",
     "A Woodbury cinema has installed moving, water-spraying seats that cost three dollars extra and have sold out at every screening."),
    ("The village of Lowther has won a national competition for the best-kept village. Judges praised its flower displays, clean streets and well-maintained playground. Residents worked together for months, planting flowers and repainting benches. The prize includes a plaque and 2,000 dollars for a community project. The village plans to spend the money on a new bus shelter.",
     "Lowther won a national best-kept village competition after months of community work and will spend its 2,000-dollar prize on a bus shelter."),
    ("A huge pumpkin weighing 780 kilograms has won first prize at the county fair in Greenholt. The pumpkin was grown by retired teacher Frank Mills, who has entered the contest for 15 years. It took a small crane to lift the pumpkin onto the scales. Mills said he fed the plant with seaweed and watered it every morning. He plans to carve it into a lantern for children at the local school.",
     "Retired teacher Frank Mills won the Greenholt county fair with a 780-kilogram pumpkin that had to be lifted by crane."),
    ("A broken water pipe under the main road in Castlebay has caused a large hole to appear. The road has been closed, and buses are taking a longer route around the town. Engineers say repairs will take at least a week because the pipe is very old. Some businesses on the road say they have lost customers. The water company has promised to replace more old pipes next year.",
     "A broken water pipe opened a hole in Castlebay's main road, which will be closed for at least a week while the old pipe is repaired."),
    ("A survey of teenagers in the Northfield region has found that most of them sleep less than eight hours on school nights. Around half said they use their phones in bed after ten o'clock. Doctors recommend that teenagers sleep between eight and ten hours. Schools in the region plan to run workshops for pupils and parents about healthy sleep. The survey was answered by more than 5,000 students.",
     "A survey of more than 5,000 Northfield teenagers found most sleep less than eight hours on school nights, and schools will run workshops on healthy sleep."),
    ("A sculpture made from 10,000 plastic bottles has been put on display in the main square of Lissford. The sculpture shows a giant whale and was made by art students over four months. The artists want to draw attention to plastic pollution in the oceans. After the exhibition, the bottles will be recycled. The sculpture will stay in the square until the end of the summer.",
     "Art students have displayed a whale sculpture made from 10,000 plastic bottles in Lissford's main square to highlight ocean plastic pollution."),
    ("Train services between Brackley and Stonehaven were suspended on Monday after a landslide covered the tracks. The landslide followed three days of heavy rain. No trains were in the area at the time. Replacement buses are running between the two towns, adding about 40 minutes to the journey. Engineers expect the line to reopen by Friday.",
     "A landslide after heavy rain closed the railway between Brackley and Stonehaven, with replacement buses running until the line reopens, expected by Friday."),
    ("A popular walking trail in the Fellside hills has been closed after damage caused by too many visitors. The path has become wide and muddy, and plants along its edges have been destroyed. Rangers will rebuild the path with stone and plant new grass. The work will take about three months. Walkers are being directed to another route nearby.",
     "A heavily used walking trail in the Fellside hills has closed for about three months while rangers rebuild the damaged path with stone."),
    ("The city of Baymouth has opened its first public charging station for electric boats. The station, in the old harbour, can charge four boats at the same time. Several tour companies in the city have recently switched to electric boats to reduce noise and pollution. The city plans to build two more stations along the river. Using the chargers costs about the same as buying diesel.",
     "Baymouth has opened its first public charging station for electric boats in the old harbour and plans two more along the river."),
    ("A retired postman in Cloverdale has knitted more than 1,000 hats for newborn babies at the local hospital. Ken Abbott learned to knit from his wife and started making the hats five years ago. He uses soft wool in bright colours and knits for about three hours every day. Nurses give a hat to every baby born on the ward. The hospital has invited him to a special thank-you tea.",
     "Retired postman Ken Abbott has knitted more than 1,000 hats for newborn babies at Cloverdale's hospital over five years."),
    ("A new law has made it illegal to leave a dog alone in a parked car on a hot day. Owners who break the law could be fined up to 500 dollars. Police and animal welfare officers will be allowed to break car windows to rescue animals in danger. The law follows several cases of dogs dying in hot cars last summer. Animal charities welcomed the change.",
     "A new law makes it illegal to leave a dog in a hot parked car, with fines of up to 500 dollars and powers for officers to break windows to rescue animals."),
]
# --------------------------------------------------------------------------- qa (hand-written)
# Closed-book questions like the original rows (no context in the turn); references are the
# acceptable short answers, the first one canonical.
QA = [
    ("What is the capital of France?", ["Paris"]),
    ("How many days are there in a week?", ["7", "seven"]),
    ("Which planet is closest to the Sun?", ["Mercury"]),
    ("What is the chemical formula for water?", ["H2O"]),
    ("Who wrote the novel Pride and Prejudice?", ["Jane Austen", "Austen"]),
    ("What is the largest mammal on Earth?", ["blue whale", "the blue whale"]),
    ("How many minutes are there in an hour?", ["60", "sixty"]),
    ("What is the capital of Italy?", ["Rome"]),
    ("Which chemical element has the symbol O?", ["oxygen"]),
    ("What is the largest hot desert in the world?", ["Sahara", "Sahara Desert"]),
    ("Who was the first President of the United States?", ["George Washington", "Washington"]),
    ("What is the capital of Germany?", ["Berlin"]),
    ("How many players does a football team have on the field during a match?", ["11", "eleven"]),
    ("What is the main language spoken in Brazil?", ["Portuguese"]),
    ("Which animal is known as the king of the jungle?", ["lion", "the lion"]),
    ("What is the capital of Spain?", ["Madrid"]),
    ("How many hours are there in a day?", ["24", "twenty-four"]),
    ("Which colour do you get by mixing blue and yellow paint?", ["green"]),
    ("Which planet is the third from the Sun?", ["Earth"]),
    ("Who discovered penicillin?", ["Alexander Fleming", "Fleming"]),
    ("What is the capital of Egypt?", ["Cairo"]),
    ("What is the longest river in Africa?", ["Nile", "Nile River", "the Nile"]),
    ("In which country do kangaroos live in the wild?", ["Australia"]),
    ("What is the freezing point of water in degrees Celsius?", ["0", "zero"]),
    ("How many sides does a triangle have?", ["3", "three"]),
    ("What is the capital of Russia?", ["Moscow"]),
    ("Who painted the ceiling of the Sistine Chapel?", ["Michelangelo"]),
    ("What is the chemical symbol for iron?", ["Fe"]),
    ("How many weeks are there in a year?", ["52", "fifty-two"]),
    ("What is the largest country in the world by area?", ["Russia"]),
    ("Which organs do humans use to breathe?", ["lungs", "the lungs"]),
    ("What is the capital of the United Kingdom?", ["London"]),
    ("Which ocean lies between Europe and North America?", ["Atlantic Ocean", "Atlantic", "the Atlantic"]),
    ("Who wrote the play Hamlet?", ["William Shakespeare", "Shakespeare"]),
    ("What is the currency of the United Kingdom?", ["pound sterling", "pound", "British pound"]),
    ("How many months of the year have 31 days?", ["7", "seven"]),
    ("What is the capital of China?", ["Beijing"]),
    ("Which gas do humans need to breathe in to stay alive?", ["oxygen"]),
    ("What is the tallest animal in the world?", ["giraffe", "the giraffe"]),
    ("In which city is the Eiffel Tower?", ["Paris"]),
    ("How many strings does a standard violin have?", ["4", "four"]),
    ("What is the capital of Japan?", ["Tokyo"]),
    ("What is the capital of Austria?", ["Vienna"]),
    ("Who proposed the theory of evolution by natural selection?", ["Charles Darwin", "Darwin"]),
    ("What is the capital of India?", ["New Delhi"]),
    ("How many bones are there in the adult human body?", ["206"]),
    ("What is the largest continent?", ["Asia"]),
    ("What is the smallest continent?", ["Australia", "Oceania"]),
    ("Which metal is liquid at room temperature?", ["mercury"]),
    ("What is the capital of Greece?", ["Athens"]),
    ("In which country is the city of Toronto?", ["Canada"]),
    ("How many centimetres are there in a metre?", ["100", "one hundred"]),
    ("What is the capital of Kenya?", ["Nairobi"]),
    ("Who wrote the novel Nineteen Eighty-Four?", ["George Orwell", "Orwell"]),
    ("What is the main ingredient of guacamole?", ["avocado", "avocados"]),
    ("Which bird is a traditional symbol of peace?", ["dove", "the dove"]),
    ("What is the capital of Mexico?", ["Mexico City"]),
    ("What is the hottest planet in the Solar System?", ["Venus"]),
    ("How many teeth does an adult human normally have?", ["32", "thirty-two"]),
    ("What is the capital of Argentina?", ["Buenos Aires"]),
    ("Which language has the most native speakers in the world?", ["Mandarin Chinese", "Mandarin", "Chinese"]),
    ("What is the name of the galaxy that contains our Solar System?", ["Milky Way", "the Milky Way"]),
    ("What is the capital of Turkey?", ["Ankara"]),
    ("Which vitamin are oranges best known for?", ["vitamin C"]),
    ("How many years are there in a century?", ["100", "one hundred"]),
    ("Which composer wrote the Fifth Symphony that opens with four famous notes?", ["Ludwig van Beethoven", "Beethoven"]),
    ("What is the capital of South Korea?", ["Seoul"]),
    ("Which African country has the largest population?", ["Nigeria"]),
    ("What is the longest bone in the human body?", ["femur", "thigh bone", "the femur"]),
    ("In which year did the Titanic sink?", ["1912"]),
    ("What is the capital of Norway?", ["Oslo"]),
    ("How many degrees are there in a right angle?", ["90", "ninety"]),
    ("What is the chemical symbol for sodium?", ["Na"]),
    ("Which scientist formulated the laws of motion and universal gravitation?", ["Isaac Newton", "Newton"]),
    ("What is the capital of Portugal?", ["Lisbon"]),
    ("What is the largest island in the world?", ["Greenland"]),
    ("How many planets are there in the Solar System?", ["8", "eight"]),
    ("Which country gave the Statue of Liberty to the United States?", ["France"]),
    ("What is the capital of Sweden?", ["Stockholm"]),
    ("What do bees make from the nectar of flowers?", ["honey"]),
    ("What is the capital of Ireland?", ["Dublin"]),
    ("How many zeros are there in one million?", ["6", "six"]),
    ("In which year did humans first land on the Moon?", ["1969"]),
    ("What is the longest river in Europe?", ["Volga", "Volga River", "the Volga"]),
    ("Which instrument is used to measure temperature?", ["thermometer", "a thermometer"]),
    ("What is the capital of Thailand?", ["Bangkok"]),
]
# --------------------------------------------------------------------------- mmlu (hand-written)
# (subject, question, correct option, three wrong options). The correct option is placed at the
# letter A, B, C, D in turn (counting over all new rows), so the letters stay balanced.
MMLU = [
    # high_school_geography
    ("high_school_geography", "Which country has the largest population in South America?", "Brazil", ["Argentina", "Colombia", "Peru"]),
    ("high_school_geography", "A narrow strip of land that connects two larger land areas is called", "an isthmus", ["a peninsula", "an archipelago", "an estuary"]),
    ("high_school_geography", "Which mountain range is usually taken as the boundary between Europe and Asia in Russia?", "the Ural Mountains", ["the Alps", "the Andes", "the Rocky Mountains"]),
    ("high_school_geography", "Imaginary lines that run from the North Pole to the South Pole are lines of", "longitude", ["latitude", "elevation", "population"]),
    ("high_school_geography", "What type of climate is typical of lowland regions near the equator?", "tropical", ["polar", "tundra", "subarctic"]),
    ("high_school_geography", "The place where a river flows into the sea is called its", "mouth", ["source", "tributary", "watershed"]),
    ("high_school_geography", "Which of these countries is landlocked?", "Switzerland", ["Italy", "Portugal", "Norway"]),
    ("high_school_geography", "An area of land surrounded by water on three sides is a", "peninsula", ["plain", "valley", "plateau"]),
    ("high_school_geography", "The Sahara Desert is located mainly on which continent?", "Africa", ["Asia", "Australia", "South America"]),
    ("high_school_geography", "What is the main cause of deforestation in the Amazon rainforest?", "clearing land for farming and cattle ranching", ["building ski resorts", "coastal fishing", "volcanic eruptions"]),
    ("high_school_geography", "Which sea lies between southern Europe and northern Africa?", "the Mediterranean Sea", ["the Caspian Sea", "the Baltic Sea", "the North Sea"]),
    ("high_school_geography", "Which of these cities is in the Southern Hemisphere?", "Sydney", ["London", "Tokyo", "Chicago"]),
    ("high_school_geography", "On a weather map, lines that join places with the same air pressure are called", "isobars", ["contour lines", "meridians", "isotherms"]),
    ("high_school_geography", "The Great Barrier Reef lies off the coast of which country?", "Australia", ["Brazil", "Indonesia", "South Africa"]),
    ("high_school_geography", "Which river flows through the city of Paris?", "the Seine", ["the Thames", "the Rhine", "the Danube"]),
    ("high_school_geography", "Which of these is a renewable source of energy?", "wind", ["coal", "natural gas", "oil"]),
    ("high_school_geography", "Which of these countries lies partly in Europe and partly in Asia?", "Turkey", ["Spain", "Brazil", "Japan"]),
    ("high_school_geography", "Which layer of the Earth do people live on?", "the crust", ["the mantle", "the outer core", "the inner core"]),
    ("high_school_geography", "A large group of islands is called", "an archipelago", ["an isthmus", "a delta", "a plateau"]),
    ("high_school_geography", "The Panama Canal connects the Pacific Ocean with the", "Atlantic Ocean", ["Indian Ocean", "Arctic Ocean", "Mediterranean Sea"]),
    ("high_school_geography", "About what fraction of the Earth's surface is covered by water?", "about 71 percent", ["about 30 percent", "about 50 percent", "about 95 percent"]),
    # elementary_mathematics
    ("elementary_mathematics", "What is 7 × 8?", "56", ["54", "48", "64"]),
    ("elementary_mathematics", "What is 1/2 + 1/4?", "3/4", ["2/6", "1/6", "2/4"]),
    ("elementary_mathematics", "What is the perimeter of a square with sides of 6 cm?", "24 cm", ["36 cm", "12 cm", "18 cm"]),
    ("elementary_mathematics", "What is 3,847 rounded to the nearest hundred?", "3,800", ["3,900", "3,850", "4,000"]),
    ("elementary_mathematics", "What is 25% of 80?", "20", ["25", "40", "16"]),
    ("elementary_mathematics", "Which fraction is equal to 0.5?", "2/4", ["1/5", "5/1", "2/5"]),
    ("elementary_mathematics", "What is the area of a rectangle that is 7 m long and 4 m wide?", "28 square metres", ["22 square metres", "11 square metres", "32 square metres"]),
    ("elementary_mathematics", "What is 1,000 − 365?", "635", ["745", "645", "735"]),
    ("elementary_mathematics", "Which of these numbers is divisible by 9?", "81", ["84", "91", "76"]),
    ("elementary_mathematics", "What is 9 squared?", "81", ["18", "27", "99"]),
    ("elementary_mathematics", "How many grams are there in 3 kilograms?", "3,000", ["300", "30", "30,000"]),
    ("elementary_mathematics", "What is the next number in the pattern 3, 6, 12, 24, ...?", "48", ["30", "36", "28"]),
    ("elementary_mathematics", "What is the sum of the angles in a triangle?", "180°", ["90°", "360°", "270°"]),
    ("elementary_mathematics", "What is 56 ÷ 7?", "8", ["7", "9", "6"]),
    ("elementary_mathematics", "Which of the following numbers is the smallest?", "0.25", ["0.3", "0.32", "0.4"]),
    ("elementary_mathematics", "If x + 9 = 15, what is x?", "6", ["24", "5", "9"]),
    ("elementary_mathematics", "How many sides does a pentagon have?", "5", ["6", "4", "8"]),
    ("elementary_mathematics", "What is the value of 2 × (3 + 5)?", "16", ["11", "13", "10"]),
    ("elementary_mathematics", "What is 3/5 written as a decimal?", "0.6", ["0.35", "0.53", "0.3"]),
    ("elementary_mathematics", "What is the mean of 4, 8 and 12?", "8", ["6", "12", "24"]),
    ("elementary_mathematics", "A book costs $12. How much do 5 books cost?", "$60", ["$17", "$50", "$72"]),
    # astronomy
    ("astronomy", "Which planet is known for its Great Red Spot, a giant storm?", "Jupiter", ["Mars", "Neptune", "Venus"]),
    ("astronomy", "About how long does the Moon take to go once around the Earth?", "about one month", ["about one week", "about one year", "about one day"]),
    ("astronomy", "A light-year is a unit of", "distance", ["time", "brightness", "mass"]),
    ("astronomy", "Which star is closest to the Earth?", "the Sun", ["Sirius", "Polaris", "Betelgeuse"]),
    ("astronomy", "Which planet takes the shortest time to orbit the Sun?", "Mercury", ["Venus", "Earth", "Neptune"]),
    ("astronomy", "The Moon shines in the night sky because it", "reflects light from the Sun", ["produces its own light", "burns gas on its surface", "glows from volcanic heat"]),
    ("astronomy", "What is at the centre of the Solar System?", "the Sun", ["the Earth", "the Moon", "Jupiter"]),
    ("astronomy", "Which of these planets is a gas giant?", "Saturn", ["Mars", "Venus", "Mercury"]),
    ("astronomy", "A group of stars that forms a recognisable pattern in the sky is called a", "constellation", ["galaxy", "nebula", "comet"]),
    ("astronomy", "During a lunar eclipse", "the Earth's shadow falls on the Moon", ["the Moon's shadow falls on the Earth", "clouds block the light of the Sun", "the Moon passes behind Jupiter"]),
    ("astronomy", "Which mission carried the first humans to land on the Moon?", "Apollo 11", ["Sputnik 1", "Voyager 1", "Vostok 1"]),
    ("astronomy", "A rocky object that burns up in the Earth's atmosphere and makes a streak of light is", "a meteor", ["a comet", "a planet", "a nebula"]),
    ("astronomy", "Which planet spins on its side, with its axis tilted by about 98 degrees?", "Uranus", ["Earth", "Mars", "Jupiter"]),
    ("astronomy", "The ocean tides on Earth are caused mainly by", "the Moon's gravity", ["the Earth's magnetic field", "the wind", "the Sun's heat"]),
    ("astronomy", "The four inner planets of the Solar System are made mainly of", "rock and metal", ["hydrogen and helium gas", "frozen water", "liquid methane"]),
    ("astronomy", "The first artificial satellite, launched in 1957, was called", "Sputnik 1", ["Hubble", "Voyager 2", "Skylab"]),
    ("astronomy", "The boundary around a black hole from which nothing can escape is called the", "event horizon", ["corona", "ecliptic", "photosphere"]),
    ("astronomy", "How long does the Earth take to spin once on its axis?", "about 24 hours", ["about 365 days", "about 30 days", "about 1 hour"]),
    ("astronomy", "Which phase of the Moon occurs when the Moon is between the Earth and the Sun?", "new moon", ["full moon", "first quarter", "waxing gibbous"]),
    ("astronomy", "A massive star that explodes violently at the end of its life produces a", "supernova", ["red dwarf", "sunspot", "meteor shower"]),
    ("astronomy", "The Hubble Space Telescope is", "a telescope in orbit around the Earth", ["a telescope on a mountain in Chile", "a probe travelling to Mars", "a space station where astronauts live"]),
    # nutrition
    ("nutrition", "A lack of which vitamin causes scurvy?", "vitamin C", ["vitamin A", "vitamin D", "vitamin B12"]),
    ("nutrition", "Which mineral is most important for strong bones and teeth?", "calcium", ["sodium", "iron", "potassium"]),
    ("nutrition", "Which nutrient is the body's main source of quick energy?", "carbohydrates", ["vitamins", "minerals", "water"]),
    ("nutrition", "Which of these foods is a good source of protein?", "lentils", ["cucumbers", "apples", "lettuce"]),
    ("nutrition", "Eating too much salt over many years is linked to", "high blood pressure", ["better eyesight", "stronger bones", "a lower heart rate"]),
    ("nutrition", "Which vitamin is important for seeing in dim light?", "vitamin A", ["vitamin C", "vitamin D", "vitamin E"]),
    ("nutrition", "Which of the following is a whole grain?", "brown rice", ["white bread", "sugar", "white flour"]),
    ("nutrition", "About how many kilocalories does one gram of carbohydrate provide?", "4", ["9", "7", "12"]),
    ("nutrition", "In which form does the body store most of its spare energy?", "fat", ["water", "vitamin C", "fibre"]),
    ("nutrition", "Which of these foods is a natural source of vitamin B12?", "fish", ["oranges", "carrots", "potatoes"]),
    ("nutrition", "A lack of iodine in the diet can cause", "goitre", ["scurvy", "rickets", "night blindness"]),
    ("nutrition", "Rickets in children is caused mainly by a lack of", "vitamin D", ["vitamin C", "iron", "fibre"]),
    ("nutrition", "Which of these drinks usually contains the most added sugar?", "a regular cola", ["water", "unsweetened tea", "black coffee"]),
    ("nutrition", "Which of the following foods is a good source of dietary fibre?", "beans", ["butter", "eggs", "fish"]),
    ("nutrition", "Which substance makes up the largest part of the human body by weight?", "water", ["protein", "fat", "calcium"]),
    ("nutrition", "Which type of fat is generally considered the least healthy?", "trans fat", ["monounsaturated fat", "polyunsaturated fat", "omega-3 fat"]),
    ("nutrition", "Which vitamin helps the blood to clot?", "vitamin K", ["vitamin A", "vitamin C", "vitamin D"]),
    ("nutrition", "Which of these vegetables is a good plant source of iron?", "spinach", ["cucumber", "celery", "iceberg lettuce"]),
    ("nutrition", "The sugar found naturally in milk is called", "lactose", ["fructose", "sucrose", "maltose"]),
    ("nutrition", "Cheese and yoghurt belong to which food group?", "dairy products", ["grains", "vegetables", "fruits"]),
    ("nutrition", "Which organ stores glycogen and helps to control the level of sugar in the blood?", "the liver", ["the lungs", "the kidneys", "the heart"]),
]
# --------------------------------------------------------------------------- mt_bench (hand-written)
# (category, first turn, second turn); no references, like the original rows.
MT_BENCH = [
    ("writing", "Write a thank-you note to a teacher who helped you prepare for an important exam.", "Make the note more formal and add a sentence about your plans for the future."),
    ("writing", "Write the opening of a short story, about 100 words long, set in a lighthouse during a storm.", "Continue the story with a surprising twist in three sentences."),
    ("writing", "Write a paragraph for a cover letter applying for a part-time job in a bookshop.", "Rewrite it for a job in a garden centre, keeping the same structure."),
    ("writing", "Write a haiku about a rainy Monday morning.", "Now write a second haiku about the same morning from the point of view of a cat."),
    ("writing", "Draft a short speech for a friend's thirtieth birthday party.", "Add a funny story about a camping trip that went wrong."),
    ("writing", "Write a review of an imaginary restaurant that serves only soup.", "Rewrite the review as a one-star review from a very grumpy customer."),
    ("writing", "Write a short blog post with five tips for people who are starting to learn a new language.", "Turn the tips into a numbered checklist of no more than 40 words."),
    ("writing", "Write a limerick about a forgetful wizard.", "Write a second limerick in which the wizard finally remembers something important."),
    ("writing", "Write an announcement for a school newsletter about a new chess club.", "Shorten it to a text message of at most two sentences."),
    ("writing", "Write a short letter to the city council asking for more bicycle parking near the train station.", "Add two concrete suggestions for where the new parking could go."),
    ("writing", "Write a motivational message for a football team that has just lost an important match.", "Rewrite it in the style of an excited sports commentator."),
    ("roleplay", "You are a tour guide in ancient Rome. Describe what visitors can see in the Forum.", "A visitor asks where to find good food nearby. Answer in character."),
    ("roleplay", "Pretend you are a librarian helping a teenager who says they hate reading. Suggest a way to start.", "The teenager says they only like video games. How do you respond?"),
    ("roleplay", "Act as a personal trainer meeting a new client who wants to run 5 kilometres. Give them a plan for the first week.", "The client says they hurt their knee last year. Adjust the plan."),
    ("roleplay", "You are a detective questioning a witness about a missing bicycle. Ask your first three questions.", "The witness admits they borrowed the bicycle. What do you say next?"),
    ("roleplay", "Pretend you are a ship's captain telling the passengers that the ship will be delayed by fog.", "A passenger complains that they will miss a wedding. Reply as the captain."),
    ("roleplay", "You are a customer service agent for an internet company. A customer says their connection keeps dropping. Respond to them.", "The customer says they have already restarted the router three times. What do you suggest now?"),
    ("roleplay", "Act as a medieval knight writing a letter home during a long journey.", "Now write the reply from the knight's younger sister."),
    ("roleplay", "You are an astronaut on the International Space Station. A child asks you what you eat in space. Answer them.", "The child now asks how you sleep. Answer in character."),
    ("roleplay", "Pretend you are a gardener giving advice to a neighbour whose tomato plants are turning yellow.", "The neighbour says they water the plants twice a day. What do you tell them?"),
    ("roleplay", "Act as an interviewer for a junior web developer job. Ask your first question and explain why you ask it.", "The candidate gives a weak answer. Ask a follow-up question that helps them."),
    ("roleplay", "You are a radio host introducing a local band before their first live performance.", "The band is running late. Fill thirty seconds of air time in character."),
    ("reasoning", "I have two coins that add up to 30 cents, and one of them is not a nickel. What are the two coins?", "Explain why the puzzle seems tricky at first."),
    ("reasoning", "If five machines take five minutes to make five widgets, how long would 100 machines take to make 100 widgets?", "How long would 10 machines take to make 50 widgets?"),
    ("reasoning", "A farmer has 17 sheep, and all but 9 run away. How many sheep are left?", "Rewrite the question so that it is no longer a trick question."),
    ("reasoning", "Which is heavier, a kilogram of feathers or a kilogram of iron? Explain.", "Why do many people get this question wrong?"),
    ("reasoning", "Tom is older than Sara, and Sara is older than Mike. Is Mike older than Tom? Explain.", "Lucy is younger than Mike. Who is the oldest and who is the youngest of the four?"),
    ("reasoning", "A bat and a ball cost $1.10 together. The bat costs $1.00 more than the ball. How much does the ball cost?", "Show how to check that your answer is correct."),
    ("reasoning", "If today is Wednesday, what day of the week will it be in 10 days?", "What day of the week was it 100 days ago?"),
    ("reasoning", "There are three boxes, one with apples, one with oranges and one with both, and every label is wrong. You may take one fruit from one box. Which box should you choose?", "Explain how you can then label all three boxes correctly."),
    ("reasoning", "All roses are flowers, and some flowers fade quickly. Can we conclude that some roses fade quickly? Explain.", "Give an everyday example of the same kind of reasoning mistake."),
    ("reasoning", "A snail climbs 3 metres up a 10-metre wall each day and slides back 2 metres each night. On which day does it reach the top?", "How would the answer change if the wall were 20 metres high?"),
    ("reasoning", "In a race, you overtake the runner in second place. What position are you in now?", "What position are you in if you overtake the runner in last place?"),
    ("math", "What is the sum of the first 10 positive integers?", "What is the sum of the first 100 positive integers? Explain your method."),
    ("math", "A car travels 150 kilometres in 2 hours. What is its average speed?", "At that speed, how long would it take to travel 375 kilometres?"),
    ("math", "Simplify the fraction 48/64.", "Write it as a decimal and as a percentage."),
    ("math", "Find the area of a circle with a radius of 5 cm, using 3.14 for pi.", "What is its circumference?"),
    ("math", "Solve the system of equations x + y = 10 and x - y = 4.", "Now solve x + 2y = 10 and x - y = 4."),
    ("math", "A shop raises a price by 20% and then lowers the new price by 20%. Is the final price the same as the original price?", "What is the final price if the original price was $50?"),
    ("math", "What is the probability of rolling a total of 7 with two fair dice?", "What is the probability of rolling a total of 12?"),
    ("math", "Find the next two numbers in the sequence 2, 5, 10, 17, 26.", "Write a formula for the n-th term."),
    ("math", "Convert 2.5 hours into minutes and into seconds.", "How many seconds are there in a whole day?"),
    ("math", "The angles of a triangle are in the ratio 2:3:4. Find the size of each angle.", "Is the triangle acute, right or obtuse?"),
    ("math", "What is the greatest common divisor of 84 and 126?", "What is their least common multiple?"),
    ("coding", "Write a Python function that counts the vowels in a string.", "Change it to return a dictionary with the count of each vowel."),
    ("coding", "Write a recursive Python function that returns the factorial of a number.", "Rewrite it without recursion."),
    ("coding", "Write a SQL query that selects all rows from a table called customers where the city is Paris.", "Change the query to count how many customers live in each city."),
    ("coding", "Write a Python function that removes duplicates from a list while keeping the original order.", "Explain the time complexity of your solution."),
    ("coding", "Write a JavaScript function that reverses the order of the words in a sentence.", "Make it also capitalise the first letter of each word."),
    ("coding", "Explain the difference between a list and a tuple in Python.", "Give an example where a tuple is the better choice."),
    ("coding", "Write a Python function that checks whether a number is prime.", "Use it to print all prime numbers below 50."),
    ("coding", "Write a Python class for a bank account with deposit and withdraw methods.", "Add a check that stops the balance from going below zero."),
    ("coding", "Write a regular expression that matches a simple email address.", "Explain each part of the expression."),
    ("coding", "Write a Python function that merges two sorted lists into one sorted list.", "Write two test cases for the function."),
    ("coding", "What does the command 'git status' show?", "Explain the difference between 'git add' and 'git commit'."),
    ("extraction", "Extract all the dates from this text: 'The contract was signed on 3 March 2021, renewed on 15 April 2022 and ended on 30 June 2023.'", "Sort the dates from the newest to the oldest."),
    ("extraction", "List the ingredients in this sentence: 'For the cake you need 200 g of flour, 150 g of sugar, three eggs and a pinch of salt.'", "Double all the quantities."),
    ("extraction", "Who wrote this note and who is it for? 'Dear Martin, the keys are under the flowerpot. Best wishes, Julia'", "Write a short reply from Martin to Julia."),
    ("extraction", "Extract the products and their prices: 'The shop sells notebooks for $3, pens for $1.50 and backpacks for $25.'", "Output them as a JSON object."),
    ("extraction", "List the countries mentioned here: 'Our tour starts in Peru, crosses into Bolivia and ends in Chile, with an optional extension to Argentina.'", "Which of these countries are part of the main tour?"),
    ("extraction", "What are the opening hours in this text? 'The pool is open from 7:00 to 21:00 on weekdays and from 9:00 to 18:00 at weekends.'", "How many hours in total is the pool open each week?"),
    ("extraction", "Identify the people and their jobs: 'Anna, a nurse, met her brother Paul, who teaches maths, and his friend Kemal, a pilot.'", "Present the result as a table."),
    ("extraction", "Extract every number from this sentence: 'In 2019 the club had 45 members, and by 2023 it had grown to 112.'", "By how many members did the club grow?"),
    ("extraction", "What is the main complaint in this review? 'The hotel was clean and the staff were kind, but the walls were so thin that we could hear every word from the next room.'", "Write a polite reply from the hotel manager."),
    ("extraction", "Extract the flight number, the departure city and the arrival time: 'Flight LX 318 leaves Zurich at 14:05 and lands in London at 14:50 local time.'", "Write it as a one-line entry for a travel itinerary."),
    ("extraction", "List all the animals mentioned: 'On the farm we saw cows, two goats, a sleepy dog and a flock of geese by the pond.'", "Group the animals into mammals and birds."),
    ("stem", "Explain how vaccines help the body fight disease.", "Why do some vaccines need booster doses?"),
    ("stem", "What causes the phases of the Moon?", "Why do we always see the same side of the Moon?"),
    ("stem", "How does a rainbow form?", "Why is the second arc of a double rainbow fainter?"),
    ("stem", "Explain what DNA is in simple terms.", "How is DNA passed from parents to their children?"),
    ("stem", "Why does ice float on water?", "Why is this important for life in lakes during winter?"),
    ("stem", "How do solar panels turn sunlight into electricity?", "Why do they produce less electricity on cloudy days?"),
    ("stem", "What is the difference between weather and climate?", "Give an example of each."),
    ("stem", "Explain how a moving bicycle stays upright.", "Why is it harder to balance a bicycle at very low speed?"),
    ("stem", "What is photosynthesis, and why is it important?", "What would happen to life on Earth without it?"),
    ("stem", "How does sound travel through the air?", "Why can't sound travel through space?"),
    ("stem", "What is an earthquake, and what causes it?", "How do engineers design buildings to survive earthquakes?"),
    ("humanities", "Why was the printing press important for the spread of ideas in Europe?", "Compare its impact with that of the internet."),
    ("humanities", "What is the difference between a novel and a short story?", "Name one famous example of each."),
    ("humanities", "Explain the idea of supply and demand.", "Use it to explain why tickets for popular concerts can be so expensive."),
    ("humanities", "What were the main reasons for building the Great Wall of China?", "Was it successful? Give arguments for and against."),
    ("humanities", "What is the purpose of a constitution?", "Why do some countries make their constitution hard to change?"),
    ("humanities", "Describe the main features of Gothic architecture.", "Name two famous Gothic buildings and say where they are."),
    ("humanities", "What is the difference between a myth and a legend?", "Give one example of each from any culture."),
    ("humanities", "Why did many people move from the countryside to cities in the 19th century?", "What problems did this cause in the cities?"),
    ("humanities", "What do philosophers mean by 'ethics'?", "Describe an everyday ethical dilemma and two ways to think about it."),
    ("humanities", "Why do languages change over time?", "Give two examples of English words whose meaning has changed."),
    ("humanities", "What role does a museum play in society?", "Should museums return objects to the countries they came from? Discuss briefly."),
]


# --------------------------------------------------------------------------- assembly


def new_rows(domain: str) -> list[dict]:
    """The generated rows of `domain` (after the originals), ids continuing the numbering."""
    start = ORIGINAL[domain].rows + 1

    def rid(i: int) -> str:
        return f"{domain}-{start + i:03d}"

    if domain == "translation":
        return [{"id": rid(i), "turns": [f"Translate German to English: {de}"], "references": list(refs)}
                for i, (de, refs) in enumerate(TRANSLATION)]
    if domain == "summarization":
        return [{"id": rid(i), "turns": [f"Summarize: {text}"], "references": [summary]}
                for i, (text, summary) in enumerate(SUMMARIZATION)]
    if domain == "qa":
        return [{"id": rid(i), "turns": [q], "references": list(refs)} for i, (q, refs) in enumerate(QA)]
    if domain == "math":
        return [{"id": rid(i), "turns": turns, "references": refs} for i, (turns, refs) in enumerate(math_rows())]
    if domain == "rag":
        return [{"id": rid(i), "turns": turns, "references": refs} for i, (turns, refs) in enumerate(rag_rows())]
    if domain == "mt_bench":
        return [{"id": rid(i), "category": cat, "turns": [t1, t2]} for i, (cat, t1, t2) in enumerate(MT_BENCH)]
    if domain == "mmlu":
        rows = []
        for i, (subject, question, correct, wrong) in enumerate(MMLU):
            letter = "ABCD"[i % 4]
            choices = list(wrong)
            choices.insert("ABCD".index(letter), correct)
            assert len(set(choices)) == 4, question
            rows.append({"id": rid(i), "subject": subject, "question": question, "choices": choices, "answer": letter})
        return rows
    raise ValueError(f"unknown domain {domain!r}")


def original_lines(domain: str) -> list[bytes]:
    """The original lines of the domain's file, checked against their recorded SHA-256."""
    lines = (BUILTIN_DIR / f"{domain}.jsonl").read_bytes().splitlines(keepends=True)
    spec = ORIGINAL[domain]
    head = lines[: spec.rows]
    if len(head) != spec.rows or hashlib.sha256(b"".join(head)).hexdigest() != spec.sha256:
        raise SystemExit(f"{domain}.jsonl: the first {spec.rows} (original) lines changed; refusing to rewrite")
    return head


def build(domain: str) -> bytes:
    head = original_lines(domain)
    rows = new_rows(domain)
    first_turns = [json.loads(line).get("turns", [json.loads(line).get("question")])[0] for line in head]
    first_turns += [row["turns"][0] if "turns" in row else row["question"] for row in rows]
    if len(set(first_turns)) != len(first_turns):
        raise SystemExit(f"{domain}: duplicate first turns")
    return b"".join(head) + b"".join(json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n" for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check that the files are up to date")
    args = parser.parse_args(argv)
    stale = []
    for domain in ORIGINAL:
        path = BUILTIN_DIR / f"{domain}.jsonl"
        content = build(domain)
        rows = content.count(b"\n")
        if path.read_bytes() == content:
            print(f"{domain}: up to date ({rows} rows)")
            continue
        if args.check:
            stale.append(domain)
            print(f"{domain}: differs from the generated content")
            continue
        path.write_bytes(content)
        print(f"{domain}: wrote {rows} rows ({ORIGINAL[domain].rows} original)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
