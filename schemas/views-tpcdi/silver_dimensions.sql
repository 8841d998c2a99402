-- A TPC-DI-style pipeline, silver layer: the dimensions (TPC-DI §4.5: DimCustomer, DimAccount,
-- DimBroker, DimCompany, DimSecurity, Prospect) built from the source tables of
-- lakeivm.datagen.tpcdi. Surrogate keys are md5() of the natural key and version, as dbt's
-- generate_surrogate_key emits them on Spark; SCD2 histories are LEAD() over each key's versions,
-- with LAST_VALUE(... IGNORE NULLS) carrying forward the fields an update leaves NULL.

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW s_customer_actions
COMMENT 'CustomerMgmt actions, cleaned: names trimmed, gender coded, emails lower-case'
AS SELECT c_id, action_ts, action_type,
          c_tax_id AS tax_id,
          upper(trim(c_l_name)) AS last_name,
          initcap(c_f_name) AS first_name,
          CASE WHEN upper(c_gender) IN ('M', 'F') THEN upper(c_gender) WHEN c_gender IS NULL THEN NULL ELSE 'U' END AS gender,
          c_tier AS tier, c_dob AS dob, lower(c_email) AS email, c_state AS state, c_country AS country
   FROM customer_mgmt
   WHERE action_type IN ('NEW', 'UPDCUST', 'INACT');

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW dim_customer
COMMENT 'SCD2 history of each customer: one row per action, effective until the next'
AS SELECT md5(concat_ws('|', CAST(c_id AS STRING), CAST(action_ts AS STRING))) AS sk_customer_id,
          c_id,
          LAST_VALUE(tax_id) IGNORE NULLS OVER w AS tax_id,
          LAST_VALUE(last_name) IGNORE NULLS OVER w AS last_name,
          LAST_VALUE(first_name) IGNORE NULLS OVER w AS first_name,
          LAST_VALUE(gender) IGNORE NULLS OVER w AS gender,
          LAST_VALUE(tier) IGNORE NULLS OVER w AS tier,
          LAST_VALUE(dob) IGNORE NULLS OVER w AS dob,
          LAST_VALUE(email) IGNORE NULLS OVER w AS email,
          LAST_VALUE(state) IGNORE NULLS OVER w AS state,
          LAST_VALUE(country) IGNORE NULLS OVER w AS country,
          CASE WHEN action_type = 'INACT' THEN 'Inactive' ELSE 'Active' END AS status,
          action_ts AS effective_ts,
          LEAD(action_ts) OVER (PARTITION BY c_id ORDER BY action_ts) AS end_ts,
          LEAD(action_ts) OVER (PARTITION BY c_id ORDER BY action_ts) IS NULL AS is_current
   FROM s_customer_actions
   WINDOW w AS (PARTITION BY c_id ORDER BY action_ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW);

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW dim_customer_current
COMMENT 'Each customer as it is now'
AS SELECT sk_customer_id, c_id, tax_id, last_name, first_name, gender, tier, dob, email, state, country, status,
          upper(concat_ws('|', last_name, first_name)) AS name_key
   FROM dim_customer
   WHERE is_current;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW dim_account
COMMENT 'SCD2 history of each account (AccountMgmt actions)'
AS SELECT md5(concat_ws('|', CAST(ca_id AS STRING), CAST(action_ts AS STRING))) AS sk_account_id,
          ca_id,
          LAST_VALUE(ca_c_id) IGNORE NULLS OVER w AS c_id,
          LAST_VALUE(ca_b_id) IGNORE NULLS OVER w AS broker_id,
          LAST_VALUE(ca_name) IGNORE NULLS OVER w AS account_name,
          LAST_VALUE(ca_tax_st) IGNORE NULLS OVER w AS tax_status,
          CASE WHEN action_type = 'CLOSEACCT' THEN 'Inactive' ELSE 'Active' END AS status,
          action_ts AS effective_ts,
          LEAD(action_ts) OVER (PARTITION BY ca_id ORDER BY action_ts) AS end_ts,
          ROW_NUMBER() OVER (PARTITION BY ca_id ORDER BY action_ts DESC) = 1 AS is_current
   FROM account_mgmt
   WINDOW w AS (PARTITION BY ca_id ORDER BY action_ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW);

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW dim_account_current
AS SELECT sk_account_id, ca_id, c_id, broker_id, account_name, tax_status, status
   FROM dim_account
   WHERE is_current;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW dim_broker
COMMENT 'Brokers: the HR file''s employees with job code 314'
AS SELECT md5(CAST(employee_id AS STRING)) AS sk_broker_id, employee_id AS broker_id, manager_id,
          first_name, last_name, branch, office, phone
   FROM hr_employees
   WHERE job_code = 314;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW s_company_versions
COMMENT 'FINWIRE CMP records with their industry'
AS SELECT c.cik, c.company_name, c.status, i.in_name AS industry, c.sp_rating, c.ceo_name, c.country, c.pts
   FROM finwire_cmp c JOIN industry i ON c.industry_id = i.in_id;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW dim_company
AS SELECT md5(concat_ws('|', CAST(cik AS STRING), CAST(pts AS STRING))) AS sk_company_id,
          cik, company_name, status, industry, sp_rating, ceo_name, country,
          NOT (sp_rating LIKE 'A%' OR sp_rating LIKE 'BBB%') AS is_low_grade,
          pts AS effective_ts,
          LEAD(pts) OVER (PARTITION BY cik ORDER BY pts) AS end_ts
   FROM s_company_versions;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW dim_company_current
AS SELECT sk_company_id, cik, company_name, industry, sp_rating, is_low_grade, country
   FROM dim_company
   WHERE end_ts IS NULL;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW dim_security
AS SELECT md5(concat_ws('|', symbol, CAST(pts AS STRING))) AS sk_security_id,
          symbol, issue_type, status, name, ex_id, sh_out, dividend, cik,
          pts AS effective_ts,
          LEAD(pts) OVER (PARTITION BY symbol ORDER BY pts) AS end_ts
   FROM finwire_sec;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW dim_security_current
AS SELECT s.sk_security_id, s.symbol, s.issue_type, s.name, s.ex_id, s.sh_out, s.dividend, s.cik,
          c.company_name, c.industry
   FROM dim_security s JOIN dim_company_current c ON s.cik = c.cik
   WHERE s.end_ts IS NULL;

-- lakeivm: deadline=2m
CREATE MATERIALIZED VIEW prospect
COMMENT 'Prospects with their marketing nameplate (TPC-DI §4.5.11)'
AS SELECT md5(concat_ws('|', agency_id, upper(last_name), upper(first_name))) AS prospect_key,
          agency_id, last_name, first_name, city, state, country, income, age, credit_rating, net_worth,
          upper(concat_ws('|', last_name, first_name)) AS name_key,
          concat_ws('+',
            CASE WHEN net_worth > 1000000 OR income > 200000 THEN 'HighValue' END,
            CASE WHEN number_children > 3 OR number_credit_cards > 5 THEN 'Expenses' END,
            CASE WHEN age > 45 THEN 'Boomer' END,
            CASE WHEN income < 50000 OR credit_rating < 600 OR net_worth < 100000 THEN 'MoneyAlert' END,
            CASE WHEN number_cars > 3 OR number_credit_cards > 7 THEN 'Spender' END,
            CASE WHEN age < 25 AND net_worth > 1000000 THEN 'Inherited' END) AS marketing_nameplate
   FROM prospects;
