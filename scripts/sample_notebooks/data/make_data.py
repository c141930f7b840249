"""Generate the small CSV files that the sample notebooks analyse.

Run once (python3 make_data.py, from any directory); the output is committed.
Standard library only and seeded, so a re-run writes the same bytes. The data are
synthetic but shaped like the real thing, including the mess a real export has:
inconsistent labels, blanks, duplicated rows, sentinel values, currency strings.
"""

import csv
import math
import os
import random
from datetime import date, datetime, timedelta

HERE = os.path.dirname(os.path.abspath(__file__))


def write(name, header, rows):
    with open(os.path.join(HERE, name), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def sales(rng):
    products = [
        ("P100", "Espresso beans 1kg", "coffee", 11.40),
        ("P101", "Filter coffee 500g", "coffee", 5.10),
        ("P102", "Decaf beans 500g", "coffee", 6.30),
        ("P200", "Green tea 100 bags", "tea", 3.20),
        ("P201", "Earl grey 50 bags", "tea", 2.10),
        ("P300", "Ceramic mug", "accessories", 3.90),
        ("P301", "Pour-over kit", "accessories", 14.80),
        ("P302", "Milk frother", "accessories", 9.70),
        ("P400", "Oat milk 1l", "dairy-free", 1.05),
    ]
    prices = {"P100": 24.0, "P101": 9.5, "P102": 12.0, "P200": 6.5, "P201": 4.8,
              "P300": 8.0, "P301": 32.0, "P302": 19.9, "P400": 2.4}
    write("products.csv", ["product_id", "product_name", "category", "unit_cost"],
          [(p, n, c, "%.2f" % cost) for p, n, c, cost in products])
    region_spellings = {
        "North": ["North", "North", "North", "north", "North "],
        "South": ["South", "South", "South", "SOUTH"],
        "East": ["East", "East", "east"],
        "West": ["West", "West", "West", "West "],
    }
    weights = [p[0] for p in products]
    popularity = [9, 7, 3, 5, 4, 3, 2, 2, 6]
    rows = []
    start = date(2024, 1, 1)
    for i in range(620):
        day = start + timedelta(days=rng.randrange(0, 182))
        region = rng.choice(["North", "North", "South", "East", "West", "West"])
        spelled = rng.choice(region_spellings[region])
        pid = rng.choices(weights, popularity)[0]
        qty = rng.choices([1, 2, 3, 4, 6, 12], [40, 25, 12, 8, 4, 2])[0]
        price = prices[pid]
        if day.month >= 4 and pid in ("P100", "P101"):
            price = round(price * 1.08, 2)
        price_text = "%.2f" % price
        if rng.random() < 0.06:
            price_text = "$" + price_text
        qty_text = "" if rng.random() < 0.03 else str(qty)
        channel = rng.choice(["web", "web", "store", "app"])
        customer = "C%04d" % rng.randrange(1, 230)
        rows.append(["O%05d" % (10000 + i), day.isoformat(), spelled, customer, pid,
                     qty_text, price_text, channel])
    rows.sort(key=lambda r: (r[1], r[0]))
    for k in rng.sample(range(len(rows)), 8):
        rows.append(list(rows[k]))
    rows.sort(key=lambda r: (r[1], r[0]))
    write("orders.csv", ["order_id", "order_date", "region", "customer_id", "product_id",
                         "quantity", "unit_price", "channel"], rows)


def weather(rng):
    cities = {"Oslo": (6.0, 11.0, 2.1), "Madrid": (15.5, 10.0, 1.2), "Dublin": (10.0, 5.0, 2.6)}
    rows = []
    for city, (mean, amp, rain) in cities.items():
        for d in range(366):
            day = date(2023, 1, 1) + timedelta(days=d)
            if day.year != 2023:
                continue
            season = -math.cos(2 * math.pi * (d - 15) / 365)
            tmax = mean + amp * season + 4 + rng.gauss(0, 2.5)
            tmin = tmax - rng.uniform(4, 11)
            wet = rng.random() < (0.45 if city != "Madrid" else 0.18)
            precip = round(rng.expovariate(1 / (rain * 3)), 1) if wet else 0.0
            humidity = min(100, max(15, round(70 - (tmax - mean) * 1.2 + (12 if wet else 0) + rng.gauss(0, 6))))
            wind = round(abs(rng.gauss(14 if city != "Madrid" else 9, 6)), 1)
            row = [day.isoformat(), city, "%.1f" % tmax, "%.1f" % tmin, "%.1f" % precip,
                   str(humidity), "%.1f" % wind]
            r = rng.random()
            if r < 0.02:
                row[2] = ""
            elif r < 0.03:
                row[5] = ""
            elif r < 0.035:
                row[4] = "-99.0"
            rows.append(row)
    write("weather_daily.csv", ["date", "city", "temp_max_c", "temp_min_c", "precip_mm",
                                "humidity_pct", "wind_kmh"], rows)


def survey(rng):
    langs = ["Python", "SQL", "JavaScript", "TypeScript", "Java", "C#", "Go", "Rust", "R", "C++"]
    weights = [60, 50, 45, 30, 22, 18, 10, 8, 12, 14]
    countries = ["Germany", "India", "United States", "Brazil", "Poland", "United Kingdom", "Netherlands"]
    rows = []
    for i in range(420):
        years = max(0, int(rng.gauss(8, 6)))
        age = "18-24" if years < 3 else rng.choice(["25-34", "25-34", "35-44"]) if years < 12 else rng.choice(["35-44", "45-54", "55+"])
        chosen = set()
        for _ in range(rng.choice([1, 2, 2, 3, 3, 4])):
            chosen.add(rng.choices(langs, weights)[0])
        languages = ";".join(sorted(chosen))
        remote = rng.choices(["Remote", "Hybrid", "In office"], [40, 42, 18])[0]
        country = rng.choice(countries)
        base = {"Germany": 62000, "India": 18000, "United States": 105000, "Brazil": 22000,
                "Poland": 36000, "United Kingdom": 64000, "Netherlands": 60000}[country]
        salary = round(base * (1 + 0.06 * years) * rng.uniform(0.75, 1.3), -2)
        salary_text = "" if rng.random() < 0.12 else "%d" % salary
        sat = min(5, max(1, round(rng.gauss(3.4 + (0.4 if remote != "In office" else -0.3), 1))))
        size = rng.choice(["1-9", "10-99", "100-999", "1000+", "1000+"])
        rows.append([1000 + i, age, country, years, languages, remote, sat, salary_text, size])
    write("dev_survey.csv", ["respondent_id", "age_group", "country", "years_coding",
                             "languages", "work_mode", "job_satisfaction", "salary_usd",
                             "company_size"], rows)


def sensors(rng):
    devices = [("D01", "Plant A", "VX-200", 2019), ("D02", "Plant A", "VX-200", 2021),
               ("D03", "Plant B", "VX-310", 2022), ("D04", "Plant B", "VX-200", 2018),
               ("D05", "Plant C", "VX-310", 2023)]
    write("devices.csv", ["device_id", "site", "model", "install_year"], devices)
    rows = []
    start = datetime(2024, 3, 4, 0, 0)
    for dev, site, model, year in devices:
        base_t = rng.uniform(38, 46)
        for k in range(288):
            ts = start + timedelta(minutes=10 * k)
            hour = ts.hour + ts.minute / 60
            load = 1 + 0.25 * math.sin(2 * math.pi * (hour - 6) / 24)
            temp = base_t * load + rng.gauss(0, 0.8)
            vib = abs(rng.gauss(2.0 + (2024 - year) * 0.25, 0.35))
            status = "OK"
            if dev == "D04" and 150 <= k <= 158:
                temp += 18 + rng.uniform(0, 4)
                vib += 5
                status = "WARN"
            if dev == "D02" and k in (40, 41):
                status = "OFFLINE"
                rows.append([ts.strftime("%Y-%m-%d %H:%M:%S"), dev, "", "", status])
                continue
            if rng.random() < 0.004:
                status = "ERR"
            rows.append([ts.strftime("%Y-%m-%d %H:%M:%S"), dev, "%.2f" % temp, "%.3f" % vib, status])
    write("sensor_readings.csv", ["timestamp", "device_id", "temperature_c",
                                  "vibration_mm_s", "status"], rows)


def reviews(rng):
    products = ["kettle", "headphones", "desk lamp", "backpack", "water bottle"]
    good = ["works great", "really happy with it", "excellent build quality", "love the design",
            "arrived quickly", "worth every penny", "comfortable to use", "battery lasts for days"]
    bad = ["stopped working after a week", "cheap plastic", "too loud", "arrived damaged",
           "not worth the price", "the strap broke", "leaks when full", "instructions were useless"]
    meh = ["does the job", "okay for the price", "a bit smaller than expected", "fine but nothing special"]
    rows = []
    for i in range(320):
        product = rng.choice(products)
        rating = rng.choices([1, 2, 3, 4, 5], [8, 9, 14, 30, 39])[0]
        if rating >= 4:
            parts = rng.sample(good, rng.choice([1, 2, 2, 3]))
            if rng.random() < 0.2:
                parts.append(rng.choice(meh))
        elif rating == 3:
            parts = [rng.choice(meh)] + ([rng.choice(good)] if rng.random() < 0.5 else [rng.choice(bad)])
        else:
            parts = rng.sample(bad, rng.choice([1, 2, 2, 3]))
        text = "The %s " % product + ", ".join(parts) + rng.choice([".", "!", ". Would buy again." if rating >= 4 else "."])
        if rng.random() < 0.1:
            text = text.upper() if rating <= 2 else text.lower()
        verified = rng.random() < 0.8
        rows.append(["R%04d" % i, product, rating, text, "yes" if verified else "no"])
    write("reviews.csv", ["review_id", "product", "rating", "text", "verified"], rows)


def churn(rng):
    rows = []
    for i in range(800):
        contract = rng.choices(["month-to-month", "one-year", "two-year"], [55, 25, 20])[0]
        tenure = max(1, int(rng.expovariate(1 / (14 if contract == "month-to-month" else 30))))
        charges = round(rng.uniform(20, 110), 2)
        calls = min(9, int(rng.expovariate(1 / 1.4)))
        z = -2.2 + 0.03 * (charges - 60) - 0.05 * tenure + 0.45 * calls + (1.3 if contract == "month-to-month" else -0.4)
        churned = 1 if rng.random() < 1 / (1 + math.exp(-z)) else 0
        rows.append(["CU%04d" % i, tenure, "%.2f" % charges, contract, calls,
                     "%.2f" % (charges * tenure), churned])
    write("customers.csv", ["customer_id", "tenure_months", "monthly_charges", "contract",
                            "support_calls", "total_charges", "churned"], rows)


def main():
    sales(random.Random(11))
    weather(random.Random(22))
    survey(random.Random(33))
    sensors(random.Random(44))
    reviews(random.Random(55))
    churn(random.Random(66))


if __name__ == "__main__":
    main()
