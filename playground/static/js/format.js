// Numbers as people read them: rupiah, kilometres, milliseconds, rates.

const rupiah = new Intl.NumberFormat("id-ID", { style: "currency", currency: "IDR", maximumFractionDigits: 0 });

export function idr(value) {
  return value === null || value === undefined ? "—" : rupiah.format(value);
}

export function km(value) {
  if (value === null || value === undefined) return "distance unknown";
  return value < 10 ? `${value.toFixed(1)} km` : `${Math.round(value).toLocaleString("en-US")} km`;
}

export function ms(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "—";
  return value < 10 ? `${value.toFixed(2)} ms` : `${Math.round(value)} ms`;
}

export function rate(value) {
  return value === null || value === undefined || !Number.isFinite(value) ? "—" : `${value.toFixed(1)} tok/s`;
}

// A number input's value, or an error naming the field.
export function numberField(input, { label, min, max, integer = false }) {
  const raw = input.value.trim();
  const value = Number(raw);
  if (raw === "" || !Number.isFinite(value)) return { error: `${label} must be a number` };
  if (integer && !Number.isInteger(value)) return { error: `${label} must be a whole number` };
  if (value < min || value > max) return { error: `${label} must be between ${min} and ${max}` };
  return { value };
}
